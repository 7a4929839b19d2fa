"""sparkbench's benchmarks of itself (``make perf`` → BENCHMARKS.md): one module per table, run from
the repository root as ``python -m perf.run_all`` (or ``python -m perf.<module>``); see README.md."""
