"""The digital twin of a unit: the engine model that paces the simulator and predicts a model's
decode speed before it is downloaded.

:mod:`.pacing` is the step-time model (bytes read per step over the bandwidth, launch costs,
speculative steps, tensor/pipeline parallel), shared by the simulator (the ``vllm_sim`` package; its
image copies this package) and the predictor (:mod:`sparkbench.predict`). Standard library only,
relative imports only: it imports nothing else of ``sparkbench``.
"""
