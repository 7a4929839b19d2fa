"""Interference: what co-residence costs a variant on a unit with residents (``bench_interference``).

* ``settings``  the host variable, checked (off by default);
* ``plan``      per plan entry, the three conditions' steps: the residents stopped for the
  measurement alone (the variant's normal result), the single-stream measurement with the
  residents present and idle, and with each resident under a steady background load
  (measure's arrival-rate phase against its port, a process of its own on the unit);
* ``block``     the result's ``coresidence`` block: each condition's per-request decode rates, its
  verdict against the variant alone (``sparkbench.verdict``, the Trust contract's words) and the
  load's own record.
"""
from .block import CONDITIONS, coresidence, rows
from .plan import entry_block
from .settings import VARIABLES, settings

__all__ = ["CONDITIONS", "VARIABLES", "coresidence", "entry_block", "rows", "settings"]
