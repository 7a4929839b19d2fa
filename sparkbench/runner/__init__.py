"""sparkbench runner: the importable API behind ``scripts/sparkbench``.

``run_bench(...)`` runs the bench playbook on ansible-runner with live host × variant progress and
returns a :class:`BenchResult` (states, rc, run dir, report path); ``run_report(run)`` renders a
stored run. Exit codes: ``EXIT_OK`` 0, ``EXIT_VARIANT_FAILED`` 1, ``EXIT_HOST_FAILED`` 2,
``EXIT_PLAYBOOK_ERROR`` 3, ``EXIT_USAGE`` 4, ``EXIT_INTERRUPTED`` 130 — non-zero if and only if
a variant or a host failed (or the run could not be made), the policy bench.yml follows too
(``sparkbench.runner.outcome``)."""

from .api import (
                  EXIT_HOST_FAILED,
                  EXIT_INTERRUPTED,
                  EXIT_OK,
                  EXIT_PLAYBOOK_ERROR,
                  EXIT_USAGE,
                  EXIT_VARIANT_FAILED,
                  BenchResult,
                  UsageError,
                  new_run_id,
                  parse_extravars,
                  run_bench,
                  run_report,
)
from .progress import DONE, FAILED, LAUNCHING, MEASURING, WAITING, Progress

__all__ = ["run_bench", "run_report", "BenchResult", "Progress", "UsageError", "parse_extravars", "new_run_id",
           "EXIT_OK", "EXIT_VARIANT_FAILED", "EXIT_HOST_FAILED", "EXIT_PLAYBOOK_ERROR", "EXIT_USAGE",
           "EXIT_INTERRUPTED", "WAITING", "LAUNCHING", "MEASURING", "DONE", "FAILED"]
