"""Bad input: one real bench.yml run over the rel_bad fixture hosts (one bad setting each, see
tests/fixtures/reliability/inventory/hosts.yml). Each host must fail with one clear message naming
the field and the fix, before any host is touched (no container of that host is ever created),
with no Python traceback; unknown quantization fails the variant at preflight with no server."""
from __future__ import annotations

import shutil

import pytest

from sparkbench.settings import settings_errors  # noqa: E402

from reliability import FIXTURES, REPO, remove_containers, run_playbook

BAD_HOSTS = ["bad-args-type", "bad-unknown-key", "bad-spec-json", "bad-output-tokens", "bad-runs",
             "bad-concurrency", "bad-duplicate", "bad-no-profile", "bad-profile-type", "bad-exposed",
             "bad-results-dir", "bad-quantization"]


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    """bench.yml -l rel_bad once; the built-in profiles plus the fixture's bad ones as the user's own."""
    tmp = tmp_path_factory.mktemp("bad")
    prof = tmp / "profiles"
    (prof / "models").mkdir(parents=True)
    for f in (FIXTURES / "profiles").glob("*.json"):
        shutil.copy(f, prof / "models" / f.name)
    try:
        yield run_playbook(tmp, "rel_bad", "relbad", "-e", f"bench_profiles_dir={prof}")
    finally:
        remove_containers(BAD_HOSTS)


# host → words its message must contain: the field (or cause) and the fix.
PLAN_CASES = {
    "bad-args-type": ["builds[0].args", "must be a mapping, got list"],
    "bad-unknown-key": ["configs[0]", "unknown key(s) flags", "allowed: args"],
    "bad-spec-json": ["args.speculative-config is not valid JSON", "write it as a YAML mapping"],
    "bad-output-tokens": ["llm_bench_output_tokens is 0", "whole number >= 1"],
    "bad-runs": ["llm_bench_runs is -1", "whole number >= 1"],
    "bad-concurrency": ["llm_bench_concurrency has 0", "parallel levels >= 1"],
    "bad-duplicate": ["variant name 'nvidia-bare' occurs twice", "rename"],
    "bad-no-profile": ["missing profile(s)", "acme__NoSuchModel-7B.json", "add the JSON file"],
    "bad-profile-type": ["acme__BadProfile-7B.json: field download_size_gb is '15 GB'",
                         "field active_params_b is -1", "must be a number > 0"],
    "bad-exposed": ["vllm_server_host is 0.0.0.0", "needs an API key", "SPARKBENCH_API_KEY",
                    "keep vllm_server_host: 127.0.0.1"],
    "bad-results-dir": ["bench_results_dir /proc/sparkbench-not-writable is not a writable directory",
                        "--results-dir"],
}


@pytest.mark.ansible
@pytest.mark.parametrize("host", sorted(PLAN_CASES))
def test_bad_input_fails_the_host_with_a_clear_message_before_it_is_touched(bad_run, host: str) -> None:
    msg = bad_run.fatal(host)
    for needle in PLAN_CASES[host]:
        assert needle in msg, f"{host}: {needle!r} not in {msg!r}"
    assert bad_run.created_for(host) == [], f"{host}: containers created {bad_run.created_for(host)}"
    assert not (bad_run.results / "relbad" / host).exists()


@pytest.mark.ansible
def test_no_traceback_and_every_bad_host_failed(bad_run) -> None:
    assert "Traceback" not in bad_run.output
    assert bad_run.rc != 0
    recap = {line.split()[0]: line for line in bad_run.output.splitlines() if ": ok=" in line}
    for host in PLAN_CASES:
        assert "failed=1" in recap[host], recap[host]


@pytest.mark.ansible
def test_unknown_quantization_fails_its_variant_at_preflight_without_a_server(bad_run) -> None:
    doc = bad_run.result("bad-quantization", "nvidia-bare")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "preflight"
    assert "quantization method nvfp5" in doc["failure"]["reason"]
    assert "remove --quantization" in doc["failure"]["remedy"]
    assert "sparkbench-vllm-bad-quantization" not in bad_run.created


@pytest.mark.unit
@pytest.mark.parametrize("settings, needle", [
    ({"output_tokens": "abc"}, "llm_bench_output_tokens is 'abc'"),
    ({"warmup": -1}, "llm_bench_warmup is -1"),
    ({"concurrency": "2,x"}, "llm_bench_concurrency has 'x'"),
    ({"context": [4096, -1]}, "llm_bench_context has -1"),
    ({"stall_timeout_s": 0}, "llm_bench_stall_timeout_s is 0"),
    ({"runs": True}, "llm_bench_runs is True"),
])
def test_settings_checks_name_the_variable(settings: dict, needle: str) -> None:
    errors = settings_errors(settings)
    assert len(errors) == 1 and needle in errors[0] and "\n" not in errors[0]


@pytest.mark.sim
def test_good_settings_and_project_profiles_pass() -> None:
    import json
    profiles = {json.loads(p.read_text())["id"]: json.loads(p.read_text())
                for p in (REPO / "sparkbench/data/profiles/models").glob("*.json")}
    hw = json.loads((REPO / "sparkbench/data/profiles/hardware" / "dgx-spark.json").read_text())
    good = {"output_tokens": 256, "runs": 3, "warmup": 0, "concurrency": [2, 4, 8], "context": [0],
            "quality_max_tokens": "4096", "request_timeout_s": 600, "stall_timeout_s": 60}
    assert settings_errors(good, profiles, hw) == []
    assert settings_errors({"concurrency": []}) == []
