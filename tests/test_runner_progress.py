"""Progress states from ansible-runner events (synthetic event dicts shaped like ansible-runner's)
and the two views: a redrawn table on a TTY, plain lines otherwise."""

from __future__ import annotations

import io

import pytest

from sparkbench.runner.progress import Progress
from sparkbench.runner.view import View, table

pytestmark = pytest.mark.unit


def ev(kind: str, host: str | None, task: str, **data) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, **data}}


def plan(host: str, names: list[str], actions: dict | None = None) -> dict:
    """The bench_plan fact the sparkbench_plan action sets (names, and per variant its action)."""
    variants = [{"name": n, "action": (actions or {}).get(n, "measure")} for n in names]
    return ev("runner_on_ok", host, "any name", res={"ansible_facts": {"bench_plan": {"names": names,
                                                                                       "variants": variants}}})


def stage(host: str, name: str, which: str) -> dict:
    """The stage fact a step sets (what the live view reads: not the task's name)."""
    return ev("runner_on_ok", host, "renamed task", task_action="ansible.builtin.set_fact",
              res={"ansible_facts": {"bench_stage": {"variant": name, "stage": which}}})


def recorded(host: str, name: str, status: str = "complete", failure: dict | None = None) -> dict:
    """What the sparkbench_result action returns: the record and the final stage fact."""
    final = {"variant": name, "stage": "failed" if status == "failed" else "done"}
    if failure:
        final["reason"] = f"{failure['stage']}: {failure['reason']}"
    return ev("runner_on_ok", host, "renamed too", task_action="sparkbench_result",
              res={"variant": name, "status": status, "failure": failure, "ansible_facts": {"bench_stage": final}})


def test_variant_lifecycle_and_changes():
    changes = []
    p = Progress(changes.append)
    p.handle(plan("h1", ["a-bare", "a-mtp2"]))
    assert p.snapshot() == {"h1": {"a-bare": "waiting", "a-mtp2": "waiting"}}
    p.handle(stage("h1", "a-bare", "launch"))
    p.handle(stage("h1", "a-bare", "measure"))
    p.handle(recorded("h1", "a-bare"))
    p.handle(stage("h1", "a-mtp2", "launch"))
    p.handle(ev("runner_on_failed", "h1", "Vllm server | wait until ready", res={"msg": "boom\nmore"}))
    p.handle(recorded("h1", "a-mtp2", "failed", {"stage": "launch", "reason": "boom\nmore"}))
    p.handle(ev("playbook_on_stats", None, "", failures={}, dark={}))
    assert p.snapshot() == {"h1": {"a-bare": "done", "a-mtp2": "failed"}}
    assert [c for c in changes if c[1] == "a-bare"] == [
        ("h1", "a-bare", "waiting"), ("h1", "a-bare", "launching"), ("h1", "a-bare", "measuring"),
        ("h1", "a-bare", "done")]
    assert p.hosts["h1"].notes["a-mtp2"] == "launch: boom"
    assert p.failed_hosts() == {} and p.finished


def test_no_regression_and_final_states_stick():
    p = Progress()
    p.handle(plan("h1", ["x"]))
    p.handle(stage("h1", "x", "measure"))
    p.handle(stage("h1", "x", "launch"))  # late event: no step back
    assert p.snapshot()["h1"]["x"] == "measuring"
    p.handle(recorded("h1", "x"))
    p.handle(recorded("h1", "x", "failed", {"stage": "measure", "reason": "late"}))
    assert p.snapshot()["h1"]["x"] == "done"
    # task names mean nothing: the old names and other tasks are ignored
    p.handle(ev("runner_on_ok", "h1", "Bench variant | record failure x"))
    p.handle(ev("runner_on_ok", "h1", "Bench | plan", res={"msg": ["y"]}))
    p.handle(ev("runner_on_ok", "h1", "vllm_server : wait for /health"))
    assert p.snapshot() == {"h1": {"x": "done"}}


def test_skipped_variants_are_done_and_a_failed_host_fails_the_rest():
    p = Progress()
    p.handle(plan("h1", ["a", "b", "c"], {"a": "skip", "b": "measure", "c": "measure"}))
    assert p.snapshot()["h1"] == {"a": "done", "b": "waiting", "c": "waiting"}
    p.handle(ev("runner_on_failed", "h1", "Bench | fail the host with that reason", res={"msg": "no docker"}))
    p.handle(ev("playbook_on_stats", None, "", failures={"h1": 1}, dark={}))
    assert p.snapshot()["h1"] == {"a": "done", "b": "failed", "c": "failed"}
    assert "no docker" in p.failed_hosts()["h1"]


def test_unreachable_and_unrescued_failure_fail_the_host():
    p = Progress()
    p.handle(plan("h1", ["x", "y"]))
    p.handle(plan("h2", ["x"]))
    p.handle(ev("runner_on_unreachable", "h2", "Bench | provision the host",
                res={"msg": "Failed to connect to the host via ssh: Connection refused"}))
    assert p.snapshot()["h2"] == {"x": "failed"}
    assert p.failed_hosts()["h2"].startswith("unreachable: Failed to connect")
    p.handle(stage("h1", "x", "launch"))
    p.handle(ev("runner_on_failed", "h1", "Bench | provision the host", res={"msg": "disk full"}))
    p.handle(ev("playbook_on_stats", None, "", failures={"h1": 1}, dark={"h2": 1}))
    assert p.snapshot()["h1"] == {"x": "failed", "y": "failed"}
    assert p.failed_hosts()["h1"] == "failed at Bench | provision the host: disk full"
    assert p.counts()["failed"] == 3


def test_unfinished_variant_is_failed_at_the_end():
    p = Progress()
    p.handle(plan("h1", ["x"]))
    p.handle(stage("h1", "x", "launch"))
    p.handle(ev("playbook_on_stats", None, "", failures={}, dark={}))
    assert p.snapshot()["h1"]["x"] == "failed"
    assert "never finished" in p.hosts["h1"].notes["x"]


def test_plain_view_prints_one_line_per_change():
    out = io.StringIO()
    p = Progress()
    v = View(p, stream=out, tty=False)
    p.on_change = v.change
    p.handle(plan("h1", ["x"]))
    p.handle(stage("h1", "x", "launch"))
    v.stop()
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["h1 x: waiting", "h1 x: launching"]
    assert "\x1b[" not in out.getvalue()


def test_tty_view_redraws_a_table():
    out = io.StringIO()
    p = Progress()
    v = View(p, stream=out, tty=True)
    p.on_change = v.change
    p.handle(plan("h1", ["a-bare", "b-bare"]))
    p.handle(plan("h2", ["a-bare"]))
    p.handle(recorded("h1", "a-bare"))
    v.stop()
    text = out.getvalue()
    assert "\x1b[" in text and "F\x1b[J" in text  # cursor up + clear: redrawn in place
    last = table(p, 1.0)
    assert "✔  done" in last and "·  waiting" in last
    assert last.splitlines()[0].split() == ["a-bare", "b-bare"]
    assert "1 done · 0 failed · 0 running · 2 waiting" in last


def test_extravars_parsing_and_secret_names(tmp_path):
    import pytest

    from sparkbench.runner.api import UsageError, parse_extravars
    f = tmp_path / "v.yml"
    f.write_text("bench_select: [nvidia-bare]\n")
    assert parse_extravars(["llm_bench_output_tokens=64", "bench_force=true", "name=abc", '{"x": [1]}', f"@{f}"]) == {
        "llm_bench_output_tokens": 64, "bench_force": True, "name": "abc", "x": [1], "bench_select": ["nvidia-bare"]}
    for secret in ("hf_token=x", "VLLM_API_KEY=x", "vault_password=x", "aws_secret_access_key=x"):
        with pytest.raises(UsageError, match="secrets are not passed as extra vars"):
            parse_extravars([secret])
