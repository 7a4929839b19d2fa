"""The bandwidth probe: what the unit streams, measured on the unit while no variant's server runs.

* ``probe.py`` — the probe program (standard library + torch): a streaming read (and on a GPU a
  GEMV of decode's shape) → one JSON object. Copied alone to the unit and run in a container of a
  variant's image; a simulated host's image answers with the simulator's stand-in
  (scripts/vllm_sim/bandwidth.py) instead.
* ``spec.py`` — the probe's container for a host (``probe_spec``): image, command, environment,
  the program's mount, the GPU request; the plan's ``probe``.
* ``reading.py`` — the container task's registered result → one reading (the figure, or the
  reason there is none), and whether probing between variants is cheap enough (``between``).
* ``block.py`` — ``protocol.bandwidth`` of a result document: the probe before the variant, the
  one after it, and the drop between them (the ``bandwidth_drop`` flag with its cause).
"""

from ..measure.bandwidth import DROP_SHARE, drop_of
from .block import FLAG, bandwidth_block, served, with_after, with_before
from .reading import BETWEEN_MAX_S, between, reading
from .spec import PROGRAM, PROGRAM_NAME, probe_spec

__all__ = ["BETWEEN_MAX_S", "DROP_SHARE", "FLAG", "PROGRAM", "PROGRAM_NAME", "bandwidth_block", "between",
           "drop_of", "probe_spec", "reading", "served", "with_after", "with_before"]
