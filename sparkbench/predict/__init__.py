"""Prediction before download: a model's decode speed on a unit, from the twin.

``sparkbench.engine_config`` reads a variant's vLLM flags into the twin's inputs and
``sparkbench.memory.fit`` checks weights + KV cache against the unit's memory (the planning layer:
the memory plan shares both); :mod:`.published` holds the published figures and the twin's error on
each (fitted and held-out rows); :mod:`.twin_rate` is the twin's rate for a stored result;
:mod:`.calibration` fits a unit's efficiency from its measured history (the SQLite index) and its
probed bandwidth; :mod:`.estimate` puts them together into one prediction; :mod:`.command` is
``sparkbench predict``.
"""
