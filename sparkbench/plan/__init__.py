"""A host's plan: the variables of one inventory host → every variant it will serve, complete.

``plan_host(variables)`` reads the host's variables (the table ``VARIABLES`` names each one and
its default; nothing else reads them), loads the profiles, expands the matrix, checks the
measurement settings, and returns for each variant::

    {name, variant, launch, config_hash, result_path, action, preflight, model_profile,
     measure_argv, summary}

so the playbook only puts steps in order and passes these objects along. ``action`` is
``measure``, or ``skip`` when a complete result with the same configuration hash is stored (and
``bench_force`` is off).

``bracket`` (``bench_bracket``, default true) is one more entry of the same shape, or None: the
host's *reference* variant — the first variant of the plan whose action is ``measure`` and whose
preflight verdict is not ``fail`` (the first one this run really launches, so the bracket spans
the whole measured sequence) — measured again at the end of the sequence, single stream only
(no parallel, context depth 0, no quality, no image: drift shows in the decode rate, and the
extra minutes stay small). Same launch spec and configuration hash as the reference; name
``<variant>.bracket``, result ``<variant>.bracket.json`` (the main result and resume never read
it); ``bracket: {of: <variant>, position: end}`` goes into its document. bench.yml runs it only
when the reference's own result of this run is complete. None when no variant is measured.

``probe`` is the bandwidth probe's container (``sparkbench.bandwidth.probe_container.probe_spec``: a
throw-away container of the image of the first variant this run launches; the simulator's
stand-in on a simulated host, torch on the GPU on a Spark, torch on the CPU on a host without a
GPU), or None when no variant launches or ``bench_bandwidth_probe`` is false. Clusters (``sparkbench.cluster``): a host in a group declared a cluster (``bench_cluster: <group>``)
plans the *single-unit* variants as every host does; a *cluster variant* (tensor-parallel-size x
pipeline-parallel-size above the hardware profile's ``gpus_per_node``) is planned on the head only
(the group's first host), in ``cluster_variants``, with the cluster's spec in ``cluster``: its
launch runs ``vllm serve`` inside the head's Ray container, its result is written under the head
host. The other members plan none (``cluster_role: worker``), but provision the cluster's images
and models. On a host that declares no cluster, a cluster variant is refused by preflight
(``cluster_needed``). ``provisioned(plan, failures)`` adds the models whose download failed to
the preflight verdicts. Bad input raises ``InputError`` naming the variable and the fix, before
any host is touched.

The unit's cache folders (Hugging Face, vLLM's compile cache, FlashInfer's JIT cache;
``sparkbench.launch.UNIT_CACHES``) lie on the unit, below its remote user's home unless a variable
sets an absolute path. The plan is built on the controller before the unit has answered, so it
holds them as ``<unit home>/…`` (``plan["unit"]``, every launch spec, summary line and cluster node);
``unit_home.with_unit(plan, home, member_homes)`` puts the unit's home in once its facts are read
(``sparkbench_plan: {unit: {home: …}}`` in playbooks/tasks/host.yml). A launch spec that still holds
the placeholder is refused (``launch["unresolved"]``), never mounted.
"""

from .bracket import BRACKET_SETTINGS, BRACKET_SUFFIX, bracket_entry, reference_entry
from .entries import provisioned
from .host import SIMULATED_DOWNLOAD_GB, ensure_host_dir, plan_host
from .resident_check import with_residents
from .variables import (
    LOOPBACK,
    VARIABLES,
    gpu_probe,
    host_variables,
    load_profiles,
    measure_command,
    probe_commands,
    server_settings,
)

__all__ = ["BRACKET_SETTINGS", "BRACKET_SUFFIX", "LOOPBACK", "SIMULATED_DOWNLOAD_GB", "VARIABLES", "bracket_entry",
           "ensure_host_dir", "gpu_probe", "host_variables", "load_profiles", "measure_command", "plan_host",
           "probe_commands", "provisioned", "reference_entry", "server_settings", "with_residents"]
