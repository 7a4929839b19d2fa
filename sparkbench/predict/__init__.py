"""Prediction before download: a model's decode speed on a unit, from the twin.

:mod:`.config` reads a variant's vLLM flags into the twin's inputs; :mod:`.published` holds the
published figures and the twin's error on each (fitted and held-out rows); :mod:`.calibration`
fits a unit's efficiency from its measured history (the SQLite index) and its probed bandwidth;
:mod:`.memory` checks weights + KV cache against the unit's memory; :mod:`.estimate` puts them
together into one prediction; :mod:`.command` is ``sparkbench predict``.
"""
