"""Residents: a measured variant deployed as a long-running service (``playbooks/serve.yml``).

* ``source``  which result a deployment comes from (the newest complete one of the variant on the
  host, or the named run's), checked: complete, its configuration hash recomputed from the
  recorded launch, enough single-stream requests for a canary verdict;
* ``spec``    the serve settings (``VARIABLES``), the resident's container (the recorded argv with
  the serving address and port, restart policy, health check, labels), the canary's measure
  command line, where the candidate starts (``placement``: beside the previous resident when the
  unit's memory allows, else in its place);
* ``canary``  the canary's judgement against the source result (``sparkbench.verdict``);
* ``record``  the deployment record (deployed / failed / undeployed) and where it lies on the
  controller and on the unit; the residents of a unit listed.
"""
