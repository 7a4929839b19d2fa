"""Interference: what co-residence costs a variant on a unit with residents (``bench_interference``).

The package spans two layers (docs/ARCHITECTURE.md), so it re-exports nothing: import the module.

* ``variable``     (planning) the host variable ``bench_interference``, checked (off by default);
* ``steps``        (planning) per plan entry, the three conditions' steps: the residents stopped
  for the measurement alone (the variant's normal result), the single-stream measurement with the
  residents present and idle, and with each resident under a steady background load (measure's
  arrival-rate phase against its port, a process of its own on the unit);
* ``coresidence``  (recording) the result's ``coresidence`` block: each condition's per-request
  decode rates, its verdict against the variant alone (``sparkbench.verdict``, the Trust
  contract's words) and the load's own record.
"""
