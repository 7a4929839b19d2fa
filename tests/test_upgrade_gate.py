"""The upgrade's gate and rounds over result documents (no unit): what passes, what is refused, what
is measured again, and what a round selects."""

from __future__ import annotations

import json
import random

import pytest

from sparkbench.errors import InputError
from sparkbench.upgrade import gate
from sparkbench.upgrade.rounds import plan_round
from sparkbench.upgrade.targets import targets

pytestmark = pytest.mark.unit


def _doc(rate: float, n: int = 10, spread: float = 0.002, seed: int = 0, status: str = "complete") -> dict:
    """A result whose single-stream requests decode at ``rate`` tok/s (± ``spread``)."""
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        r = rate * (1 + rng.gauss(0, spread))
        runs.append({"valid": True, "error": None, "decode_tok_s": r, "completion_tokens": 64})
    doc = {"status": status, "simulated": True, "single": {"runs": runs, "decode_tok_s_median": rate}}
    if status != "complete":
        doc["failure"] = {"stage": "launch", "reason": "the engine exited at start"}
    return doc


def test_a_fall_beyond_the_tolerance_is_refused_with_its_verdict():
    j = gate.judge([_doc(100.0)], [_doc(85.0, seed=1)], tolerance_pct=2.5, accept_unresolved=False, again_left=True)
    assert j["state"] == "refused" and "differs by" in j["reason"] and "beyond the 2.5 % bridge tolerance" in j["reason"]
    assert j["figures"][0]["outcome"] == "fall" and j["figures"][0]["verdict"]["pct"] < -2.5


def test_a_rise_or_a_fall_within_the_tolerance_passes():
    assert gate.judge([_doc(100.0)], [_doc(102.5, seed=1)], tolerance_pct=2.5, accept_unresolved=False,
                      again_left=True)["state"] == "passed"
    within = gate.judge([_doc(100.0)], [_doc(99.0, seed=1)], tolerance_pct=2.5, accept_unresolved=False,
                        again_left=True)
    assert within["state"] == "passed", within


def test_a_verdict_that_cannot_tell_is_measured_again_then_refused_unless_accepted():
    noisy = dict(n=5, spread=0.08)
    cur, cand = [_doc(100.0, **noisy)], [_doc(99.0, seed=3, **noisy)]
    assert gate.judge(cur, cand, tolerance_pct=2.5, accept_unresolved=False, again_left=True)["state"] == "again"
    refused = gate.judge(cur, cand, tolerance_pct=2.5, accept_unresolved=False, again_left=False)
    assert refused["state"] == "refused" and "cannot tell within the 2.5 % tolerance" in refused["reason"]
    assert "upgrade_accept_unresolved=true" in refused["reason"]
    accepted = gate.judge(cur, cand, tolerance_pct=2.5, accept_unresolved=True, again_left=False)
    assert accepted["state"] == "passed" and accepted["accepted_unresolved"]


def test_a_candidate_that_failed_is_refused_naming_why():
    j = gate.judge([_doc(100.0)], [_doc(0.0, status="failed")], tolerance_pct=2.5, accept_unresolved=False,
                   again_left=True)
    assert j["state"] == "refused" and "did not become healthy" in j["reason"] and "exited at start" in j["reason"]


class _Source:
    def __init__(self, path):
        self.path, self.image, self.run = str(path), "sparkbench/vllm-sim:v0.24.0", "R1"


class _Record:
    """A deployment record's fields the upgrade reads."""

    def __init__(self, path, variant="nvidia-bare"):
        self.variant, self.host, self.container = variant, "spark01", f"sparkbench-resident-{variant}"
        self.base_url, self.health_settings = "http://127.0.0.1:8080", {"runs": 5, "output_tokens": 64}
        self.source = _Source(path)


@pytest.fixture()
def record(tmp_path):
    variant = {"name": "nvidia-bare", "build": "nvidia", "config": "bare", "model": "nvidia/Qwen3.6-35B-A3B-NVFP4",
               "revision": None, "image": "sparkbench/vllm-sim:v0.24.0", "vllm_version": "0.24.0", "env": {},
               "args": {"max-num-seqs": 8}, "kind": "matrix", "index": 0, "preflight": True}
    path = tmp_path / "R1" / "spark01" / "nvidia-bare.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"variant": variant}))
    return _Record(path)


def test_the_candidate_is_the_residents_variant_with_the_new_image(record):
    [t] = targets([record], "spark01", variant=None, image="sparkbench/vllm-sim:v0.25.0", revision=None,
                  candidate_version="0.25.0")
    assert t["current"]["name"] == "nvidia-bare.current" and t["current"]["image"] == "sparkbench/vllm-sim:v0.24.0"
    assert t["candidate"]["name"] == "nvidia-bare" and t["candidate"]["image"] == "sparkbench/vllm-sim:v0.25.0"
    assert t["candidate"]["vllm_version"] == "0.25.0" and t["current"]["vllm_version"] == "0.24.0"
    assert t["candidate"]["args"] == t["current"]["args"] == {"max-num-seqs": 8}
    assert "kind" not in t["candidate"] and t["settings"] == {"runs": 5, "output_tokens": 64}


@pytest.mark.parametrize("kwargs, named", [
    ({"image": None, "revision": None}, "upgrade_image is not set"),
    ({"image": "sparkbench/vllm-sim:v0.24.0", "revision": None}, "already runs"),
    ({"image": "x:v1", "revision": None, "variant": "nvidia-mtp3"}, "upgrade_variant=nvidia-mtp3: not a resident"),
])
def test_bad_input_is_named_before_anything_starts(record, kwargs, named):
    with pytest.raises(InputError, match=named):
        targets([record], "spark01", **{"variant": None, "candidate_version": None, **kwargs})
    with pytest.raises(InputError, match="has no resident"):
        targets([], "spark01", variant=None, image="x:v1", revision=None, candidate_version=None)


def test_rounds_measure_first_then_again_then_decide(record, tmp_path):
    [t] = targets([record], "spark01", variant=None, image="sparkbench/vllm-sim:v0.25.0", revision=None,
                  candidate_version="0.25.0")
    run = tmp_path / "U1"
    host = run / "spark01"
    first = plan_round([t], run, "spark01", runs=5, tolerance_pct=2.5, accept_unresolved=False)
    assert first["kind"] == "measure" and first["select"] == ["nvidia-bare.current", "nvidia-bare"]
    assert first["bracket"] and first["runs"] is None and first["stop"][0]["container"] == record.container
    host.mkdir(parents=True)
    noisy = dict(n=5, spread=0.08)
    (host / "nvidia-bare.current.json").write_text(json.dumps(_doc(100.0, **noisy)))
    (host / "nvidia-bare.json").write_text(json.dumps(_doc(99.0, seed=3, **noisy)))
    again = plan_round([t], run, "spark01", runs=5, tolerance_pct=2.5, accept_unresolved=False)
    assert again["select"] == ["nvidia-bare.current.r1", "nvidia-bare.r1"] and again["runs"] == 10
    assert not again["bracket"] and {e["name"] for e in again["extra_variants"]} >= set(again["select"])
    (host / "nvidia-bare.current.r1.json").write_text(json.dumps(_doc(100.0, n=10, seed=4)))
    (host / "nvidia-bare.r1.json").write_text(json.dumps(_doc(103.0, n=10, seed=5)))
    done = plan_round([t], run, "spark01", runs=5, tolerance_pct=2.5, accept_unresolved=False)
    assert done["kind"] == "decided" and done["judgements"]["nvidia-bare"]["state"] == "passed", done
    assert done["stop"] == []


def test_an_extra_variant_that_replaces_stands_in_for_the_variant_of_its_name():
    from sparkbench.matrix import variant_matrix

    builds = [{"name": "nvidia", "model": "nvidia/Qwen3.6-35B-A3B-NVFP4", "args": {"max-num-seqs": 8}}]
    configs = [{"name": "bare"}]
    candidate = {"name": "nvidia-bare", "build": "nvidia", "config": "bare", "image": "x:v2", "replaces": True}
    [v] = variant_matrix(builds, configs, image="x:v1", extra_variants=[candidate])
    assert v["name"] == "nvidia-bare" and v["image"] == "x:v2" and v["kind"] == "extra"
    with pytest.raises(Exception, match="occurs twice"):  # without it, the same name is a mistake
        variant_matrix(builds, configs, image="x:v1", extra_variants=[{**candidate, "replaces": False}])
