"""Residents: a measured variant deployed as a long-running service (``playbooks/serve.yml``).

* ``source``              which result a deployment comes from (the newest complete one of the
  variant on the host, or the named run's), checked: complete, its configuration hash recomputed
  from the recorded launch, enough single-stream requests for a canary verdict;
* ``deploy_plan``         the serve settings (``VARIABLES``), the resident's container (the recorded
  argv with the serving address and port, restart policy, health check, labels), the canary's
  measure command line, where the candidate starts (``placement``: beside the previous resident
  when the unit's memory allows, else in its place);
* ``memory``              the unit's memory plan with the deployment in it (``sparkbench.memory``);
* ``canary``              the canary's judgement against the source result (``sparkbench.verdict``);
* ``deployment_records``  the deployment record (deployed / failed / undeployed / replaced) and where
  it lies on the controller and on the unit (read back through ``sparkbench.residents``);
* ``health_canary``       a resident unit's health canary (``playbooks/health.yml``).
"""
