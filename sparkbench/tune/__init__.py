"""``sparkbench tune``: the flags searched for the user.

* ``space``: SPACE.yml as a model (base variant, objective, budget, the values per key);
* ``points``: the grid, each point's name and the variant that measures it;
* ``search``: the order (the prediction first, then Optuna's sampler) and the study in the run folder;
* ``answer``: the winner, its verdict against the runner-up, the cheaper of two equals;
* ``rounds`` and ``decide``: one round decided from the run folder, ``tune.json`` and ``winner.yml``.
"""

#: every point with its status and figures, and the winner (``results/<run>/tune.json``)
TUNE_FILE = "tune.json"
#: the winner's matrix entry as a vars file bench.yml and serve.yml take (``results/<run>/winner.yml``)
WINNER_FILE = "winner.yml"
