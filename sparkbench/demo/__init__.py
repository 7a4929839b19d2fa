"""``make demo`` in steps (``python -m sparkbench.demo`` runs them: ``__main__``): the source
article's matrix on one simulated Spark first, its table within minutes, then the quality and image
checks, the fleet (health and the fleet comparison), the version bridge, two Sparks over Ray and
real vLLM on this CPU. ``plan`` holds the steps, their estimates and how they run; ``seed``,
``fleet`` and ``units`` the steps; ``play`` runs a playbook with progress lines; ``pieces`` builds
an image a step needs the first time it needs it; ``show`` prints what the reports say; ``console``
the clock and output."""
