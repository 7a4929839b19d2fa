"""The unit's memory plan, built on the controller before any container starts (bench.yml's
variants and serve.yml's deploys alike). Pure functions over plain dicts:

* ``engine``    one vLLM engine's share (``--gpu-memory-utilization`` × the unit's total; on a CPU
  host ``VLLM_CPU_KVCACHE_SPACE`` + weights + runtime) and what lies inside it (weights, KV cache
  at ``--max-model-len``, activations, CUDA graphs: ``fit``'s arithmetic), and what vLLM would
  refuse of it alone;
* ``fit``       the one implementation of an engine's memory arithmetic (weights, KV cache, the
  context check, what fits in a share), shared with ``sparkbench predict``;
* ``resident_rows`` the residents already on the unit (the unit's listing, else the controller's
  deployment records: ``sparkbench.residents``), each as an engine row from the result it was
  deployed from;
* ``unit``      the host's total, reserve and tenants (``VARIABLES``: ``bench_tenants``,
  ``bench_memory_reserve_gb``, ``bench_unit_memory_gb``), the plan (``plan``) and its refusal
  with the numbers, the fix and vLLM's own message (``refusal``);
* ``table``     the plan as the table ``--check`` prints.
"""
from .engine import engine_row
from .resident_rows import present, row_from_result, rows
from .unit import VARIABLES, context, plan, refusal, tenants

MEMORY_IDS = ("memory_plan", "max_model_len_beyond_model", "kv_cache_beyond_share", "weights_beyond_share")

__all__ = ["MEMORY_IDS", "VARIABLES", "context", "engine_row", "plan", "present", "refusal", "row_from_result", "rows", "tenants"]
