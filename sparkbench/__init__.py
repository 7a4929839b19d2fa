"""sparkbench: the pure logic behind the playbooks, the reports and the runner.

One owner per data shape (docs/ARCHITECTURE.md lists them): the variant matrix and launch spec
(:mod:`sparkbench.launch`), the measurement settings (:mod:`sparkbench.settings`), the result
document (:mod:`sparkbench.result`), the report's numbers (:mod:`sparkbench.report`). The filter
and action plugins in the repository are thin adapters over these modules.

``sparkbench/measure/`` is the measurement: a standard-library package with relative imports
only, built into ``measure.pyz`` (:mod:`sparkbench.measure_bundle`) and run on each host as
``python3 -I measure.pyz``. The rest of the package may import it; it imports nothing of the rest.
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``: the project's version (:mod:`sparkbench.version`), read when asked for, so
    that importing the package reads no file (the simulator's image carries only part of it)."""
    if name == "__version__":
        from .version import VERSION

        return VERSION
    raise AttributeError(f"module 'sparkbench' has no attribute {name!r}")
