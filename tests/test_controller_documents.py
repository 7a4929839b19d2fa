"""The controller's own documents as models (sparkbench.documents.health, .deployment): the health
document (results/<run>/health.json) and the deployment record (.deployments/<host>/). Each model
accepts what the current code writes (built by the real functions: health.judge + health.write,
serve.deployment_records.record + deployment_records.write), a document written before ``schema_version`` loads as version
1, a wrong key or type is refused naming its path, and every reader names a bad file and its field
(a missing file stays what it was: no verdicts, no record)."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import pytest
from test_health import OLD_DRIVER, canary, fleet
from test_serve_units import doc as source_doc
from test_serve_units import labelled

from sparkbench import health, history, residents
from sparkbench.documents import DeploymentRecord, DocumentError, HealthDocument, load_deployment, load_health
from sparkbench.documents import deployment as deployment_model
from sparkbench.documents import health as health_model
from sparkbench.errors import InputError
from sparkbench.memory import resident_rows
from sparkbench.runner import cli
from sparkbench.runner.playbooks import _health_outcome
from sparkbench.serve import canary as canary_mod
from sparkbench.serve import deploy_plan, deployment_records, health_canary, source

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parent.parent / "sparkbench"
DEPLOYED_AT = "2026-11-01T00:00:00Z"


def problems(exc: pytest.ExceptionInfo) -> dict[str, str]:
    return dict(exc.value.problems)


# --------------------------------------------------------------------------- health.json

def judgements() -> dict[str, dict]:
    """health.judge's verdicts of every kind of unit: measured (healthy, slow by peers, slow by
    history), failed without a canary result and with a failed one, a resident unit (measured and
    failed)."""
    dep = {"name": "sparkbench-resident-nvidia-bare", "variant": "nvidia-bare", "deployed_at": DEPLOYED_AT,
           "run": "R1", "port": 8080, "samples": [60.0, 60.2, 59.9, 60.1, 59.8]}
    past = {**canary("spark01", 60.0, seed=1), "_run_id": "health-old"}
    return {
        "capped": health.judge(fleet(rate=24.0, clock=850.0, power=30.0)),
        "driver": health.judge(fleet(driver=OLD_DRIVER)),
        "history": health.judge([{"host": "spark01", "doc": canary("spark01", 50.0, seed=2)}], {"spark01": past}),
        "failed": health.judge([{"host": "spark01", "doc": None, "reason": "unreachable: ssh"},
                                {"host": "spark02", "doc": canary("spark02", status="failed")}]),
        "resident": health.judge([{"host": "spark01", "doc": canary("spark01", 50.0, seed=2), "deployment": dep},
                                  {"host": "spark02", "doc": None, "reason": "measure: unreachable",
                                   "deployment": dep}]),
    }


def written(tmp_path: Path, name: str = "capped") -> Path:
    return Path(health.write(tmp_path / name, judgements()[name], name)["health.json"])


def test_the_health_model_accepts_every_document_health_writes(tmp_path):
    for name, judgement in judgements().items():
        path = Path(health.write(tmp_path / name, judgement, name)["health.json"])
        raw = json.loads(path.read_text())
        assert raw["schema_version"] == "1" and raw["run_id"] == name
        doc = load_health(path)
        assert isinstance(doc, HealthDocument) and doc.schema_version == "1"
        assert [u.verdict for u in doc.units] == [u["verdict"] for u in judgement["units"]]
        # the model gives the document back as written
        assert doc.model_dump(exclude_unset=True) == raw
    capped = load_health(tmp_path / "capped" / "health.json").units[2]
    assert capped.verdict == "slow" and capped.figures.peers.verdict == "differs" and capped.figures.history is None
    assert capped.figures.flags == [] and capped.figures.manifest.driver == "580.95.05"
    resident = load_health(tmp_path / "resident" / "health.json").units
    assert resident[0].resident.port == 8080 and resident[0].figures.deployment.deployed_at == DEPLOYED_AT
    assert resident[1].failure.stage == "host" and resident[1].figures.model_fields_set == set()
    failed = load_health(tmp_path / "failed" / "health.json").units
    assert failed[0].failure.stage == "host" and failed[1].figures.n == 5 and failed[1].figures.peers is None


def test_a_health_document_without_schema_version_is_version_1(tmp_path):
    raw = json.loads(written(tmp_path).read_text())
    del raw["schema_version"]
    # written before sparkbench_version was recorded, too
    del raw["sparkbench_version"], raw["sparkbench_commit"]
    doc = load_health(raw)
    assert doc.schema_version == "1" and doc.sparkbench_version is None
    with pytest.raises(DocumentError, match=r"schema_version: Input should be '1' \(got '2'\)"):
        load_health({**raw, "schema_version": "2"})


@pytest.mark.parametrize("edit, path, reason", [
    (lambda d: d.update(bogus=1), "bogus", "unknown key"),
    (lambda d: d["units"][0].update(colour="red"), "units[0].colour", "unknown key"),
    (lambda d: d["units"][2]["figures"]["peers"].update(extra=1), "units[2].figures.peers.extra", "unknown key"),
    (lambda d: d["units"][2]["figures"]["manifest"].update(bios="1.2"), "units[2].figures.manifest.bios",
     "unknown key"),
    (lambda d: d["units"][1].update(verdict="sick"), "units[1].verdict",
     "Input should be 'healthy', 'slow' or 'failed'"),
    (lambda d: d["units"][0]["figures"].update(n="five"), "units[0].figures.n", "valid integer"),
    (lambda d: d["units"][0]["figures"].update(decode_tok_s=True), "units[0].figures.decode_tok_s", "valid number"),
    (lambda d: d.update(unhealthy=-1), "unhealthy", "greater than or equal to 0"),
    (lambda d: d["units"][2].pop("line"), "units[2].line", "required key missing"),
    (lambda d: d["units"][2]["figures"].pop("clock_max_mhz"), "units[2].figures", "lacks clock_max_mhz"),
    (lambda d: d["units"][2].update(failure=None, verdict="failed"), "units[2]",
     "a unit has a failure when, and only when, it failed"),
    (lambda d: d["units"][2]["figures"]["peers"].update(reason="too few"), "units[2].figures.peers",
     "a peer group without a judgement (reason) has no median_tok_s"),
])
def test_a_wrong_key_or_type_in_health_json_is_refused_by_its_path(tmp_path, edit, path, reason):
    raw = json.loads(written(tmp_path).read_text())
    edit(raw)
    with pytest.raises(DocumentError, match="health document does not match its model") as exc:
        load_health(raw)
    assert path in problems(exc) and reason in problems(exc)[path], problems(exc)


def test_health_write_refuses_a_judgement_its_model_refuses(tmp_path):
    judgement = judgements()["capped"]
    judgement["units"][0]["figures"]["peers"]["verdict"] = "maybe"
    with pytest.raises(DocumentError, match=r"units\[0\]\.figures\.peers\.verdict: Input should be 'differs'"):
        health.write(tmp_path / "R", judgement, "R")
    assert not (tmp_path / "R" / "health.json").exists()


def test_the_health_readers_name_a_bad_file_and_keep_a_missing_one_as_it_was(tmp_path, capsys):
    res = tmp_path / "results"
    run = res / "R1"
    (run / "spark-sim01").mkdir(parents=True)
    (run / "spark-sim01" / "nvidia-bare.json").write_text(json.dumps(canary("spark-sim01")))
    # no health.json: no verdicts (the index's health is NULL), no exit code from it
    assert history.rows(res, "spark-sim01")[0]["health"] is None
    assert _health_outcome(run) == (None, None)
    health.write(run, health.judge([{"host": "spark-sim01", "doc": canary("spark-sim01")}]), "R1")
    assert history.rows(res, "spark-sim01")[0]["health"] == "healthy"
    assert _health_outcome(run)[0] == 0
    # a health.json that is not JSON, and one whose verdict is not one: the health verb's exit code
    # says so; the history index names the file and the field and leaves that run's verdicts out
    # (one bad file never stops the index, nor the report that reads it)
    (run / "health.json").write_text('{"units": [')
    with pytest.raises(DocumentError, match=rf"{run / 'health.json'}: not JSON"):
        _health_outcome(run)
    capsys.readouterr()
    assert history.rows(res, "spark-sim01")[0]["health"] is None
    assert f"history: {run / 'health.json'}: not JSON" in capsys.readouterr().err
    doc = json.loads(written(tmp_path).read_text())
    doc["units"][0]["verdict"] = "fine"
    (run / "health.json").write_text(json.dumps(doc))
    with pytest.raises(DocumentError, match=r"health.json: health document does not match its model: "
                                            r"units\[0\]\.verdict: Input should be"):
        _health_outcome(run)
    history.rebuild(res)
    err = capsys.readouterr().err
    assert "health document does not match its model: units[0].verdict: Input should be" in err
    assert err.rstrip().endswith("that run's health verdicts are left out")
    assert cli.main(["history", "spark-sim01", "--results-dir", str(res)]) == 0


def test_the_health_models_name_what_sparkbench_health_writes():
    assert set(health_model.ManifestFields.model_fields) == set(health.MANIFEST_FIELDS)
    assert set(get_args(health_model.HealthVerdict)) == {"healthy", "slow", "failed"}
    fig = health.unit_figures(canary("spark-sim01"))
    assert tuple(fig) == health_model.CANARY_FIGURES


# --------------------------------------------------------------------------- the deployment record

def full_deployment(tmp_path: Path, variant: str = "v1", previous: str | None = "v0") -> dict:
    """A deployment completed on its unit (spec.on_unit): placement, previous resident, health argv."""
    src = tmp_path / "R" / "h1" / f"{variant}.json"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(json.dumps(source_doc()))
    s = deploy_plan.settings({})
    dep = deploy_plan.deployment(source.source(source_doc(), str(src), "R"), s, "h1")
    dep.update(variant=variant, names=deploy_plan.names(s, variant))
    containers = []
    if previous:
        containers = [{**labelled(previous), "Labels": {
            "sparkbench.resident": previous, "sparkbench.role": "resident", "sparkbench.port": "8080",
            "sparkbench.run": "R0", "sparkbench.config_hash": "c" * 64}}]
    return deploy_plan.on_unit(dep, s, "/home/u", residents.residents(containers), "MemAvailable: 125829120 kB\n",
                        "sha256:aa")


def judged_canary() -> dict:
    base = [100.0, 101.0, 99.0, 100.5, 100.2]
    measured = json.dumps({"single": {"runs": [{"decode_tok_s": r, "valid": True} for r in base]}})
    out = canary_mod.judge(base, measured, 0, 5)
    out["samples"] = canary_mod.samples_of(measured)
    return out


def records(tmp_path: Path) -> dict[str, DeploymentRecord]:
    """Every state a record is written in, from the real functions."""
    dep = full_deployment(tmp_path)
    deployed = deployment_records.record(dep, "deployed", "2026-12-01T00:00:00Z", canary=judged_canary())
    failed = deployment_records.record(dep, "failed", "2026-12-02T00:00:00Z", canary=judged_canary(),
                           failure={"stage": "canary", "reason": "slow", "log_excerpt": "x" * 5000},
                           left=deployment_records.left_behind(dep, "canary", True, False))
    lost = deployment_records.record(full_deployment(tmp_path, previous=None), "failed", "2026-12-02T00:00:00Z",
                         failure={"stage": "unreachable", "reason": "gone"}, left="the unit stopped answering")
    # a unit that never answered: the deployment as planned (no placement, no health argv)
    planned = deploy_plan.deployment(source.source(source_doc(), "p", "R"), deploy_plan.settings({}), "h1")
    unreachable = deployment_records.record(planned, "failed", "2026-12-03T00:00:00Z", failure={"stage": "unreachable"})
    return {"deployed": deployed, "failed": failed, "lost": lost, "unreachable": unreachable,
            "undeployed": deployment_records.undeployed(deployed, "2026-12-04T00:00:00Z")}


def test_the_record_model_accepts_every_record_serve_writes(tmp_path):
    recs = records(tmp_path)
    assert recs["deployed"].schema_version == "1" and recs["deployed"].canary.passed
    assert recs["deployed"].previous.port == "8080"  # the label's text
    assert recs["failed"].failure.remedy == deployment_records.REMEDY["canary"] and len(recs["failed"].failure.log_excerpt) == 4000
    assert recs["unreachable"].placement is None and recs["unreachable"].health_argv is None
    assert recs["undeployed"].deployed_at == "2026-12-01T00:00:00Z"
    for name, rec in recs.items():
        paths = deployment_records.write(tmp_path / "results", rec)
        for path in paths.values():
            raw = json.loads(Path(path).read_text())
            assert raw["schema_version"] == "1" and raw["kind"] == deployment_records.KIND
            assert load_deployment(path).document() == raw == rec.document(), name
    # the deployed v1 took v0's port: v0's current record says replaced
    v0 = full_deployment(tmp_path, "v0", previous=None)
    results = tmp_path / "results2"
    deployment_records.write(results, deployment_records.record(v0, "deployed", "2026-11-01T00:00:00Z", canary=judged_canary()))
    deployment_records.write(results, recs["deployed"])
    replaced = residents.load(residents.controller_dir(results, "h1") / "v0.json")
    assert replaced.state == "replaced" and replaced.replaced_by == "v1" and replaced.when == recs["deployed"].when
    assert [r.variant for r in residents.deployed(results, "h1")] == ["v1"]


def test_a_record_written_before_schema_version_loads_as_version_1(tmp_path):
    raw = records(tmp_path)["deployed"].document()
    del raw["schema_version"]
    # the first records had no health_settings or health_remote_dir
    del raw["health_settings"], raw["health_remote_dir"]
    path = residents.controller_dir(tmp_path, "h1") / "v1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(raw))
    rec = residents.load(path)
    assert rec.schema_version == "1" and rec.health_settings is None and "schema_version" not in rec.model_fields_set
    assert residents.deployed(tmp_path, "h1") == [rec]
    # rewritten (undeployed, replaced), it says its version
    assert deployment_records.undeployed(rec, "2026-12-05T00:00:00Z").document()["schema_version"] == "1"
    # health.yml refuses to measure it against its deployment, naming the fix
    with pytest.raises(InputError, match="no health_settings, health_remote_dir .*deploy it again"):
        health_canary.canary(residents.residents([labelled("v1")]), [rec], tmp_path, "H", "h1")


@pytest.mark.parametrize("edit, path, reason", [
    (lambda d: d.update(owner="me"), "owner", "unknown key"),
    (lambda d: d["source"].update(bogus=1), "source.bogus", "unknown key"),
    (lambda d: d["canary"]["verdict"].update(text="x"), "canary.verdict.text", "unknown key"),
    (lambda d: d.update(port="8080"), "port", "valid integer"),
    (lambda d: d.update(api_key="no"), "api_key", "valid boolean"),
    (lambda d: d["canary"]["samples"].__setitem__(1, "fast"), "canary.samples[1]", "valid number"),
    (lambda d: d.update(state="paused"), "state", "Input should be 'deployed', 'failed', 'undeployed' or 'replaced'"),
    (lambda d: d.update(kind="something.else"), "kind", "Input should be 'sparkbench.deployment'"),
    (lambda d: d["placement"].update(mode="sideways"), "placement.mode", "Input should be 'fresh'"),
    (lambda d: d["previous"].update(port=[8080]), "previous.port", "valid integer"),
    (lambda d: d.pop("variant"), "variant", "required key missing"),
    (lambda d: d.update(failure={"stage": "canary", "reason": "r", "remedy": "x", "log_excerpt": ""}), "(top level)",
     "state deployed with a failure"),
])
def test_a_wrong_key_or_type_in_a_record_is_refused_by_its_path(tmp_path, edit, path, reason):
    raw = records(tmp_path)["deployed"].document()
    edit(raw)
    with pytest.raises(DocumentError, match="deployment record does not match its model") as exc:
        load_deployment(raw)
    assert path in problems(exc) and reason in problems(exc)[path], problems(exc)


def test_record_refuses_a_deployment_its_model_refuses():
    dep = {"host": "h1", "variant": "v1", "port": "8080", "names": {"resident": "r"}, "source": {"run": "R"}}
    with pytest.raises(DocumentError, match=r"port: Input should be a valid integer \(got '8080'\)"):
        deployment_records.record(dep, "deployed", "2026-12-01T00:00:00Z")


def test_the_record_readers_name_a_bad_file_and_keep_a_missing_one_as_it_was(tmp_path):
    base = residents.controller_dir(tmp_path, "h1")
    assert residents.load(base / "v1.json") is None and residents.deployed(tmp_path, "h1") == []
    deployment_records.write(tmp_path, records(tmp_path)["deployed"])
    assert [r.variant for r in residents.deployed(tmp_path, "h1")] == ["v1"]
    (base / "v2.json").write_text("{not json")
    with pytest.raises(DocumentError, match=rf"{base / 'v2.json'}: not JSON"):
        residents.deployed(tmp_path, "h1")
    (base / "v2.json").write_text(json.dumps({"kind": deployment_records.KIND, "state": "deployed"}))
    with pytest.raises(DocumentError, match=rf"{base / 'v2.json'}: deployment record does not match its model: "
                                            r"host: required key missing"):
        residents.deployed(tmp_path, "h1")
    # the memory plan's residents come from the same records: the bad one is named there too
    with pytest.raises(DocumentError, match="v2.json: deployment record does not match"):
        resident_rows.present(tmp_path, "h1")
    # a record carried as a fact is read through the model as well
    with pytest.raises(DocumentError, match="deployment record does not match its model: state"):
        deployment_records.as_record({**records(tmp_path)["deployed"].document(), "state": None})


def test_the_record_model_names_what_serve_record_writes():
    assert deployment_model.KIND == deployment_records.KIND and deployment_model.SCHEMA_VERSION == deployment_records.SCHEMA_VERSION
    assert get_args(deployment_model.State) == deployment_records.STATES
    assert set(get_args(deployment_model.FailedStage)) == set(deployment_records.REMEDY)


# --------------------------------------------------------------------------- imported on first use

REPO = PACKAGE.parent


def _plugins_imports() -> set[str]:
    """What Ansible's workers import: every action and filter plugin's sparkbench modules (the health
    and record modules among them: sparkbench_health, sparkbench_serve_*, sparkbench_plan*)."""
    out = set()
    for path in [*(REPO / "action_plugins").glob("*.py"), *(REPO / "filter_plugins").glob("*.py")]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparkbench"):
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names if _file(f"{node.module}.{a.name}"))
    return out


def _file(module: str) -> Path | None:
    """The file of a ``sparkbench`` module (a package: its ``__init__.py``), None outside the package."""
    if module == "sparkbench":
        return PACKAGE / "__init__.py"
    if not module.startswith("sparkbench."):
        return None
    rel = PACKAGE.joinpath(*module.split(".")[1:])
    return next((p for p in (rel.with_suffix(".py"), rel / "__init__.py") if p.is_file()), None)


def _top_imports(module: str) -> set[str]:
    """What importing ``module`` imports: its top-level imports (not those inside functions or under
    ``if TYPE_CHECKING``), each with the packages above it (their ``__init__`` runs first)."""
    path = _file(module)
    if path is None:
        return set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(above + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if _file(f"{base}.{a.name}"))
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, len(n.split(".")) + 1)}


def test_the_plugins_modules_import_the_models_only_where_a_document_is_read_or_written():
    seen: set[str] = set()
    todo = sorted(_plugins_imports())
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += sorted(_top_imports(module) - seen)
    for module in ("sparkbench.serve.deployment_records", "sparkbench.serve.health_canary", "sparkbench.health", "sparkbench.history",
                   "sparkbench.memory.resident_rows", "sparkbench.ansible_action", "sparkbench.measure.figures"):
        assert module in seen, module  # the walk follows the plugins' imports
    bad = sorted(m for m in seen if m.startswith(("sparkbench.documents", "pydantic")))
    assert not bad, f"imported when the plugins load: {bad}"
