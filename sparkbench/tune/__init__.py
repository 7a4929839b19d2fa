"""``sparkbench tune``: the flags searched for the user.

* ``space``: SPACE.yml as a model (base variant, objective, budget, the values per key);
* ``points``: the grid, each point's name and the variant that measures it;
* ``search``: the order (the prediction first, then Optuna's sampler) and the study in the run folder;
* ``answer``: the winner, its verdict against the runner-up, the cheaper of two equals.
"""
