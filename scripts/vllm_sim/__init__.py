"""sparkbench's vLLM-compatible simulator (standard library only).

Modules, one job each: ``cli`` (flags + validation), ``knobs`` (VLLM_SIM_* environment),
``profiles`` (hardware/model JSON), ``pacing`` (roofline step-time model), ``engine`` (the
continuous-batching step loop), ``answers`` (answer book + text), ``pngdecode`` (image question),
``metrics`` (Prometheus exposition), ``server`` (HTTP/SSE), ``faults`` (fault modes),
``vlog`` (vLLM-format logging), ``hf`` (``hf download`` stand-in), ``nvsmi`` (``nvidia-smi``
stand-in), ``unit_account`` / ``unit_traffic`` (one unit's memory and memory bus shared by its
engines, ``VLLM_SIM_UNIT_DIR``).
"""
