"""The command line of ``scripts/sparkbench``: every verb, its options and an example each
(``--help``). Parsing only; :mod:`sparkbench.runner.cli` runs what is parsed."""

from __future__ import annotations

import argparse

from .. import version
from .api import EXIT_HOST_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PLAYBOOK_ERROR, EXIT_USAGE, EXIT_VARIANT_FAILED

EXIT_CODES = f"""exit codes (the playbooks follow the same policy; cron and CI can read either):
  {EXIT_OK}    no variant and no host failed (an incomplete variant keeps its figures and does not fail the run)
  {EXIT_VARIANT_FAILED}    a variant failed (its result file has stage, reason, remedy); health: a unit is slow;
       serve: the deploy was refused or rolled back (the previous resident keeps serving)
  {EXIT_HOST_FAILED}    a host was unreachable or failed as a whole; health: a unit failed
  {EXIT_PLAYBOOK_ERROR}    ansible-playbook failed before/around the hosts (syntax, inventory, no hosts matched)
  {EXIT_USAGE}    bad command line
  {EXIT_INTERRUPTED}  interrupted
secrets: never pass tokens with -e; export HF_TOKEN (or use ansible-vault)."""

EXAMPLES = {
    "provision": """examples:
  scripts/sparkbench provision -l spark01              images, model cache and the measurement script
  scripts/sparkbench provision -l spark01 --check      probes only, changes nothing
  scripts/sparkbench provision -l spark01 -e spark_host_install_missing=true""",
    "bench": """examples:
  scripts/sparkbench bench -l spark-sim01              the matrix on one (simulated) unit
  scripts/sparkbench bench -l spark01 --run-id 20261130T120000Z      resume that run
  scripts/sparkbench bench -l spark01 --check          the plan and the unit's memory plan, nothing started""",
    "health": """examples:
  scripts/sparkbench health -l sim_sparks              one canary per unit, a verdict per unit
  scripts/sparkbench health -e bench_health_canary=nvidia-bare --run-id health-20261201""",
    "serve": """examples:
  scripts/sparkbench serve deploy nvidia-mtp3 -l spark01            the newest complete result of it
  scripts/sparkbench serve deploy nvidia-mtp3 -l spark01 --run 20261130T120000Z --port 8080
  scripts/sparkbench serve list -l spark01
  scripts/sparkbench serve undeploy nvidia-mtp3 -l spark01""",
    "teardown": """examples:
  scripts/sparkbench teardown -l spark01               containers and work directory; caches kept
  scripts/sparkbench teardown -l spark01 --purge-cache the model, compile and JIT caches too""",
    "tune": """examples:
  scripts/sparkbench tune docs/guides/seed-space.yml -l spark-sim01     the seed's MTP depth × batched tokens
  scripts/sparkbench tune space.yml -l sim_sparks --run-id tune-mtp      trials spread over peers; reuse to resume
exit codes: 0 a winner, 1 no point could be measured, 3 a round's playbook failed, 4 a bad space, 130 Ctrl-C""",
    "upgrade": """examples:
  scripts/sparkbench upgrade sparkbench/vllm-sim:v0.25.0 -l spark-sim01     every resident of the unit
  scripts/sparkbench upgrade vllm/vllm-openai:v0.26.0 -l spark01 --variant nvidia-mtp3 -e upgrade_tolerance_pct=5
  scripts/sparkbench upgrade vllm/vllm-openai:v0.26.0 -l spark01 --check     what it would measure; nothing starts
exit codes: 0 passed and deployed, 1 refused (the resident serves as before) or rolled back, 3 a round's
playbook failed, 4 bad input (before anything starts), 130 Ctrl-C (the same --run-id goes on)""",
    "report": """example:
  scripts/sparkbench report 20261130T120000Z --baseline 20261129T080000Z""",
    "history": """example:
  scripts/sparkbench history spark-sim03 nvidia-bare""",
    "schema": """examples:
  scripts/sparkbench schema                            the result document's JSON Schema (schema/result.schema.json)
  scripts/sparkbench schema | diff - schema/result.schema.json    no output: the checked-in file is current""",
    "profile": """example:
  scripts/sparkbench profile nvidia/Qwen3.6-35B-A3B-NVFP4 --dry-run""",
    "predict": """example:
  scripts/sparkbench predict nvidia/Qwen3.6-35B-A3B-NVFP4 --host spark-sim01""",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(EXIT_USAGE, f"sparkbench: {message} (see --help)\n")


def _verb(sub, name: str, help_text: str, codes: bool = True) -> argparse.ArgumentParser:
    epilog = EXAMPLES.get(name, "") + (f"\n\n{EXIT_CODES}" if codes else "")
    return sub.add_parser(name, help=help_text, description=help_text, epilog=epilog.strip() or None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _playbook_options(p: argparse.ArgumentParser, check: str) -> None:
    """-i, -l, -e, --check, --plain, -v: what every playbook verb passes through."""
    p.add_argument("-i", "--inventory", action="append", help="inventory file or folder, repeatable "
                                                              "(default: ansible.cfg's, inventory/)")
    p.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook -l")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE|@FILE",
                   help="extra variable (repeatable); value parsed as JSON when it is JSON")
    p.add_argument("--check", action="store_true", help=check)
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    p.add_argument("-v", "--verbose", action="count", default=0, help="ansible verbosity (artifacts only)")


def _bench(sub) -> None:
    b = _verb(sub, "bench", "run bench.yml with live progress, then the report and its closing table")
    _playbook_options(b, "ansible-playbook --check: the plan and the unit's memory plan; nothing starts")
    b.add_argument("--run-id", help="results/<run-id> (default: UTC time YYYYmmddTHHMMSSZ); reuse to resume")
    b.add_argument("--playbook", default="bench.yml", help="playbook (default: bench.yml)")
    b.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    b.add_argument("--baseline", help="compare the report with this stored run (id or directory)")
    b.add_argument("--no-report", action="store_true", help="do not render the report at the end")


def _tune(sub) -> None:
    t = _verb(sub, "tune", "search a variant's flags (playbooks/tune.yml): preflight prunes, the prediction "
                           "orders, Optuna searches; a winner with its verdict", codes=False)
    t.add_argument("space", help="SPACE.yml: base, objective, budget, space (docs/guides/tune.md)")
    _round_options(t, "the unit(s) to tune on", "extra variable (repeatable)",
                   "results/<run-id> (default: tune-<UTC time>); reuse to resume")


def _round_options(p: argparse.ArgumentParser, units: str, extra: str, run_id: str) -> None:
    """-i, -l (required), -e, --run-id, --results-dir: a verb that runs a playbook in rounds."""
    p.add_argument("-i", "--inventory", action="append", help="inventory file or folder, repeatable")
    p.add_argument("-l", "--limit", required=True, help=f"{units}, as ansible-playbook -l")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE|@FILE", help=extra)
    p.add_argument("--run-id", help=run_id)
    p.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")


def _upgrade(sub) -> None:
    u = _verb(sub, "upgrade", "upgrade a unit's residents to a new image (playbooks/upgrade.yml): measured "
                              "beside the current one, gated by verdicts, deployed or refused", codes=False)
    u.add_argument("image", nargs="?", help="the candidate image (leave out with --model-revision alone, or where "
                                            "the inventory sets upgrade_image per unit)")
    _round_options(u, "the unit(s)", "extra variable (repeatable), e.g. upgrade_tolerance_pct=5, "
                   "upgrade_accept_unresolved=true", "results/<run-id> (default: upgrade-<UTC time>); reuse to go on")
    u.add_argument("--variant", help="one resident (default: every resident of the unit)")
    u.add_argument("--model-revision", help="the same image with this model revision")
    u.add_argument("--check", action="store_true", help="what each resident's round would measure and compare; "
                                                         "nothing starts")
    u.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal (--check)")
    u.add_argument("-v", "--verbose", action="count", default=0, help="ansible verbosity (artifacts only)")


def _playbook_verbs(sub) -> None:
    """provision, bench, health, serve (deploy, list, undeploy), teardown."""
    p = _verb(sub, "provision", "get units ready to benchmark (playbooks/provision.yml): probes, images, model "
                                "pre-download, the measurement script")
    _playbook_options(p, "probes only, changes nothing")
    _bench(sub)
    h = _verb(sub, "health", "fleet health (playbooks/health.yml): one canary per unit, a verdict per unit "
                             "against its peers and its history")
    _playbook_options(h, "say which canary would run where; nothing is measured")
    h.add_argument("--run-id", help="results/<run-id> (default: health-<UTC time>); reuse to resume")
    h.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    s = _verb(sub, "serve", "residents (playbooks/serve.yml): deploy a measured variant as a service with a "
                            "canary and rollback, list them, undeploy")
    actions = s.add_subparsers(dest="action", required=True, metavar="{deploy,list,undeploy}")
    d = actions.add_parser("deploy", help="deploy VARIANT exactly as measured; a failing canary rolls back",
                           epilog=EXAMPLES["serve"], formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("variant", help="the variant name, as in the run's result")
    d.add_argument("--run", help="the run id to deploy from (default: the newest run where VARIANT is complete)")
    d.add_argument("--port", type=int, help="the resident's port (default 8080)")
    _playbook_options(d, "print the resident's command and the unit's memory plan; touch nothing")
    ls = actions.add_parser("list", help="the units' residents", epilog=EXAMPLES["serve"],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _playbook_options(ls, "the same (listing changes nothing)")
    u = actions.add_parser("undeploy", help="stop and remove VARIANT's resident", epilog=EXAMPLES["serve"],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    u.add_argument("variant", help="the variant name of the resident")
    _playbook_options(u, "say what would be removed")
    t = _verb(sub, "teardown", "remove what bench.yml leaves on units (playbooks/teardown.yml); caches kept "
                               "unless --purge-cache")
    _playbook_options(t, "say what would be removed")
    t.add_argument("--purge-cache", action="store_true", help="remove the model, compile and JIT caches too")


def _stored_verbs(sub) -> None:
    r = _verb(sub, "report", "render a stored run's report (report.md/html, results.csv/json, charts)", codes=False)
    r.add_argument("run", help="run id or results/<run-id>")
    r.add_argument("--baseline", help="run id or directory to compare with (run to run + version bridge)")
    r.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    r.add_argument("--fleet-threshold", type=float, default=5.0, help="flag hosts this %% below the fleet median")
    r.add_argument("--bridge-threshold", type=float, default=2.5, help="version bridge tolerance in %%")
    h = _verb(sub, "history", "a unit's trend over the stored runs (the SQLite index, sparkbench.history)",
              codes=False)
    h.add_argument("host", help="inventory host name, e.g. spark-sim03")
    h.add_argument("variant", nargs="?", help="one variant (default: every variant of the host)")
    h.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    _verb(sub, "schema", "print the result document's JSON Schema, generated from its models (sparkbench.documents)",
          codes=False)


def _model_verbs(sub) -> None:
    m = _verb(sub, "profile", "write a model profile from config.json and the safetensors headers", codes=False)
    m.add_argument("model", help="a model folder (a Hugging Face snapshot or a checkpoint), or ORG/NAME on the Hub "
                                 "(config.json and the shards' headers by range request; HF_TOKEN for gated models)")
    m.add_argument("--revision", default="main", help="Hub revision: branch, tag or commit (default: main)")
    m.add_argument("--id", dest="model_id", help="ORG/NAME (default: read from the snapshot path or config.json)")
    m.add_argument("--profiles-dir", help="where your own profiles live, over the built-in ones (default: profiles/ "
                                          "at the repo root)")
    m.add_argument("--dry-run", action="store_true", help="print the profile instead of writing it")
    q = _verb(sub, "predict", "predicted decode tok/s of a model on a unit, before it is downloaded", codes=False)
    q.add_argument("model", help="a model id with a profile, a model folder, or ORG/NAME on the Hub (headers only)")
    q.add_argument("--hardware", help="hardware profile (default: dgx-spark)")
    q.add_argument("--host", help="an inventory host: calibrate on its measured history and its bandwidth probe")
    q.add_argument("--args", dest="args_json", help="vLLM flags as JSON, e.g. "
                   '\'{"kv-cache-dtype": "fp8", "max-model-len": 65536, '
                   '"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}\'')
    q.add_argument("--acceptance", help="MTP acceptance per position, e.g. 0.87,0.69 (default: the model profile's)")
    q.add_argument("--vllm-version", default="0.25.0", help="vLLM version the prediction is for (default: 0.25.0)")
    q.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    q.add_argument("--profiles-dir", help="where your own profiles live, over the built-in ones (default: profiles/ "
                                          "at the repo root)")
    q.add_argument("--fit-variant", help="a hardware fitted on the unit (x86-cpu): the variant whose result fits it "
                                         "(default: the host's newest complete result of the model)")
    q.add_argument("--json", action="store_true", help="print the prediction as JSON")


def parser() -> argparse.ArgumentParser:
    """``scripts/sparkbench``'s parser: every verb."""
    p = _Parser(prog="sparkbench", description="Reproducible vLLM benchmarks on DGX Spark units: one command per job. "
                                               "`sparkbench VERB --help` shows a verb's options and an example.",
                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=version.describe(),
                   help="print sparkbench's version and the commit it runs from")
    sub = p.add_subparsers(dest="command", required=True, metavar="VERB")
    _playbook_verbs(sub)  # provision, bench, health, serve, teardown: the jobs in the order a user meets them
    _tune(sub)
    _upgrade(sub)
    _stored_verbs(sub)
    _model_verbs(sub)
    return p
