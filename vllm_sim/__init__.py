"""sparkbench's vLLM-compatible simulator (standard library only; the step-time model is
``sparkbench.twin``). Run it as ``python3 scripts/vllm_sim serve MODEL [flags]`` or
``python -m vllm_sim serve MODEL [flags]``.

Modules, one job each: ``cli`` (start-up sequence + dispatch), ``serve_flags`` (``vllm serve``'s
flags), ``validation`` (vLLM's checks of them), ``knobs`` (VLLM_SIM_* environment), ``profiles``
(hardware/model JSON), ``engine`` (the continuous-batching step loop), ``answers`` (answer book +
text), ``pngdecode`` (image question), ``metrics`` (Prometheus exposition), ``server`` (HTTP/SSE),
``faults`` (fault modes), ``vlog`` (vLLM-format logging), ``hf`` (``hf download`` stand-in),
``nvsmi`` (``nvidia-smi`` stand-in), ``unit_account`` / ``unit_traffic`` (one unit's memory and
memory bus shared by its engines, ``VLLM_SIM_UNIT_DIR``).
"""
