"""``sparkbench upgrade``: a resident's current image against a candidate image (``playbooks/upgrade.yml``).

* ``targets``  per resident of the unit: its current variant (``<variant>.current``) and the
  candidate (``<variant>``: the new image or model revision), measured with its canary settings;
* ``rounds``   what a round measures, from what the run folder holds, and each resident's gate once
  both are measured;
* ``gate``     the single-stream verdict of the candidate against the current, with the tolerance:
  passed, refused, or measured again;
* ``kernels``  what changed inside: the aspects of the startup log's ``kernels`` block (attention,
  MoE, GEMM, CUDA graphs, KV cache, model load) whose values differ between the two images;
* ``flags``    the resident's flags checked against the candidate's own vLLM parser: the ones it
  would refuse, each with its fix;
* ``document`` ``<host>/<variant>.upgrade.json``, the decision and what it stands on.
"""
