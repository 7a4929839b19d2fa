"""The bandwidth probe: what the unit streams, measured on the unit while no variant's server runs.

The package spans two layers (docs/ARCHITECTURE.md), so it re-exports nothing: import the module.

* ``probe.py`` — the probe program (standard library + torch): a streaming read (and on a GPU a
  GEMV of decode's shape) → one JSON object. Copied alone to the unit and run in a container of a
  variant's image; a simulated host's image answers with the simulator's stand-in
  (vllm_sim/bandwidth.py) instead.
* ``probe_container.py`` (planning) — the probe's container for a host (``probe_spec``): image,
  command, environment, the program's mount, the GPU request; the plan's ``probe``.
* ``reading.py`` (planning) — the container task's registered result → one reading (the figure, or
  the reason there is none), and whether probing between variants is cheap enough (``between``).
* ``protocol_block.py`` (recording) — ``protocol.bandwidth`` of a result document: the probe before
  the variant, the one after it, and the drop between them (the ``bandwidth_drop`` flag with its
  cause).
"""
