"""The unit's memory plan, built on the controller before any container starts (bench.yml's
variants and serve.yml's deploys alike). Pure functions over plain dicts:

* ``engine``    one vLLM engine's share (``--gpu-memory-utilization`` × the unit's total; on a CPU
  host ``VLLM_CPU_KVCACHE_SPACE`` + weights + runtime) and what lies inside it (weights, KV cache
  at ``--max-model-len``, activations, CUDA graphs: ``sparkbench.predict.memory``'s arithmetic),
  and what vLLM would refuse of it alone;
* ``residents`` the residents already on the unit (the unit's listing, else the controller's
  deployment records), each as an engine row from the result it was deployed from;
* ``unit``      the host's total, reserve and tenants (``VARIABLES``: ``bench_tenants``,
  ``bench_memory_reserve_gb``, ``bench_unit_memory_gb``), the plan (``plan``) and its refusal
  with the numbers, the fix and vLLM's own message (``refusal``);
* ``table``     the plan as the table ``--check`` prints.
"""
from .engine import engine_row
from .residents import present, row_from_result, rows
from .unit import VARIABLES, context, plan, refusal, tenants

MEMORY_IDS = ("memory_plan", "max_model_len_beyond_model", "kv_cache_beyond_share", "weights_beyond_share")

__all__ = ["MEMORY_IDS", "VARIABLES", "context", "engine_row", "plan", "present", "refusal", "row_from_result", "rows", "tenants"]
