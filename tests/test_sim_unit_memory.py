"""One simulated unit, several engines (VLLM_SIM_UNIT_DIR): a share that does not fit fails at start
with vLLM's text, dead engines' entries do not block, and a busy co-resident engine slows the other
by the bandwidth it takes (judged on the engines' own planned timeline, never on wall-clock bounds)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import openai
import pytest

from sparkbench import preflight
from sparkbench.twin.pacing import PacingModel
from vllm_sim import unit_account as ua
from vllm_sim import unit_traffic as ut

from conftest import REPO_ROOT, SIM_DIR, TEST_ENV_DEFAULTS, port_in

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
ARGS = ["--max-num-batched-tokens", "4096"]
TOTAL = 128e9  # the dgx-spark profile's unified_memory_gb


def entry(pid: int, share: float, **extra) -> dict:
    """An account entry as an engine writes it (this process's namespace unless ``extra`` says otherwise)."""
    me = ua.Identity.here()
    return {"id": f"fake-{pid}", "pid": pid, "pid_ns": me.pid_ns, "boot_id": me.boot_id, "proc_start": None,
            "share_bytes": share, "heartbeat": time.time(), **extra}


def seed(unit, e: dict) -> None:
    (unit / "engines").mkdir(parents=True, exist_ok=True)
    (unit / "engines" / f"{e['id']}.json").write_text(json.dumps(e))


# --------------------------------------------------------------------------- pure
@pytest.mark.unit
def test_refusal_text_is_vllms_request_memory_with_its_figures():
    text = ua.shortage_text(51.2e9, TOTAL, 0.5, 64e9)
    assert text == ("Free memory on device cuda:0 (47.68/119.21 GiB) on startup is less than desired GPU memory "
                    "utilization (0.5, 59.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                    "other processes.")
    issue = preflight.vllm_log_match(f"ValueError: {text}", preflight.load_known_issues())
    assert issue["id"] == "startup_memory_short" and "47.68 GiB" in issue["remedy"]


@pytest.mark.unit
def test_shares_and_tenants_add_up_and_a_release_gives_memory_back(tmp_path):
    first = ua.UnitAccount(str(tmp_path), TOTAL)
    first.register(0.6, {"model": "a"})
    with pytest.raises(ua.MemoryShortage) as short:
        ua.UnitAccount(str(tmp_path), TOTAL).register(0.5, {"model": "b"})
    assert short.value.free == pytest.approx(51.2e9) and short.value.requested == 64e9
    (tmp_path / "tenants.json").write_text(json.dumps([{"name": "rag", "gb": 20}]))
    with pytest.raises(ua.MemoryShortage):  # 128 - 76.8 - 20 = 31.2 GB free < 38.4
        ua.UnitAccount(str(tmp_path), TOTAL).register(0.3, {})
    first.release()
    assert not list((tmp_path / "engines").iterdir())
    ua.UnitAccount(str(tmp_path), TOTAL).register(0.8, {})  # 128 - 20 = 108 GB free >= 102.4


@pytest.mark.unit
def test_entries_of_dead_or_silent_engines_do_not_block(tmp_path):
    me = ua.Identity.here()
    seed(tmp_path, entry(2 ** 22 + 1, 0.9 * TOTAL))                                # no such pid
    seed(tmp_path, {**entry(me.pid, 0.9 * TOTAL, proc_start="0"), "id": "reused"})  # a reused pid
    seed(tmp_path, entry(7, 0.9 * TOTAL, pid_ns="pid:[1]", heartbeat=time.time() - 60))  # another container, silent
    account = ua.UnitAccount(str(tmp_path), TOTAL, lease_s=0.2)
    account.register(0.9, {})
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == [f"{account.id}.json"]
    # another container's fresh entry blocks only while it keeps its lease: the start waits one lease
    seed(tmp_path, entry(8, 0.5 * TOTAL, pid_ns="pid:[1]"))
    account.release()
    t0 = time.monotonic()
    ua.UnitAccount(str(tmp_path), TOTAL, lease_s=0.2).register(0.9, {})
    assert time.monotonic() - t0 >= 0.2
    assert ua.is_live(entry(9, 1.0, pid_ns="pid:[1]"), me, time.time(), 3.0)


class FakeAccount:
    """Stands in for UnitAccount in the bandwidth model's tests."""

    def __init__(self, others: list[dict]) -> None:
        self.entry, self.published, self._others = {}, [], others

    def heartbeat(self, traffic: dict) -> None:
        self.published.append(traffic)

    def others(self) -> list[dict]:
        return self._others


@pytest.mark.unit
def test_a_busy_neighbour_stretches_steps_by_the_summed_demand_and_an_idle_one_fades():
    assert ut.step_share(0.7e9, 1e9, 1.0) == pytest.approx(0.7) and ut.step_share(5e9, 1e9, 1.0) == 1.0
    now = time.time()
    busy = FakeAccount([{"traffic": {"share": 0.8, "at": now - 5, "busy": True}}])
    traffic = ut.UnitTraffic(busy, bw_bytes_s=1e9)
    traffic.publish()
    assert traffic.pace(0.7e9 * 0.01, 0.01, 0.01, now) == pytest.approx(0.01 * 1.5)
    assert traffic.last_slowdown == pytest.approx(1.5)
    traffic.publish()
    assert busy.published[-1]["busy"] and busy.published[-1]["share"] == traffic.demand.share
    traffic.idle()
    traffic.publish()
    assert not busy.published[-1]["busy"]
    idle = ut.UnitTraffic(FakeAccount([{"traffic": {"share": 0.8, "at": now - 2, "busy": False}}]), bw_bytes_s=1e9)
    idle.publish()
    assert idle.others_demand(now) == pytest.approx(0.8 * math.exp(-4), rel=1e-6)
    assert idle.pace(0.7e9 * 0.01, 0.01, 0.01, now) == 0.01  # 0.7 + 0.015 < 1: no slowdown
    demand = ut.Demand()
    for i in range(200):  # 2 s of steady 10 ms steps at share 0.9: the demand converges on it
        demand.add(0.9, now + i * 0.01, now + (i + 1) * 0.01)
    assert demand.now(now + 2.0) == pytest.approx(0.9 * (1 - math.exp(-2.0 / ut.TAU_S)))
    assert demand.now(now + 3.0) == pytest.approx(demand.now(now + 2.0) * math.exp(-1.0 / ut.TAU_S))


# --------------------------------------------------------------------------- processes
def get(sim, path: str) -> dict:
    return json.loads(urllib.request.urlopen(sim.base_url + path, timeout=30).read())


def unit_env(unit) -> dict[str, str]:
    return {"VLLM_SIM_UNIT_DIR": str(unit)}


def start(sim_factory, unit, util: float):
    return sim_factory(args=[*ARGS, "--gpu-memory-utilization", str(util)], env=unit_env(unit),
                       port=port_in(19650, 19700))


@pytest.mark.sim
def test_a_second_engine_that_does_not_fit_fails_at_start_with_vllms_text(sim_factory, tmp_path):
    unit = tmp_path / "unit"
    gone = subprocess.Popen(["true"])
    gone.wait()
    seed(unit, entry(gone.pid, 0.9 * TOTAL))                                              # a dead engine here
    seed(unit, entry(7, 0.9 * TOTAL, pid_ns="pid:[1]", heartbeat=time.time() - 60))  # a silent container
    first = start(sim_factory, unit, 0.6)
    info = get(first, "/sim/info")["unit"]
    assert info["share_bytes"] == 76.8e9 and info["engines"] == [] and info["free_bytes"] == pytest.approx(51.2e9)

    env = {**os.environ, **TEST_ENV_DEFAULTS, **unit_env(unit)}
    p = subprocess.run([sys.executable, str(SIM_DIR), "serve", MODEL, *ARGS, "--gpu-memory-utilization", "0.5",
                        "--port", str(port_in(19650, 19700))], capture_output=True, text=True, env=env, timeout=60)
    text = ("ValueError: Free memory on device cuda:0 (47.68/119.21 GiB) on startup is less than desired GPU memory "
            "utilization (0.5, 59.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    assert p.returncode == 1 and text in p.stdout and text in p.stderr.splitlines()
    assert p.stderr.strip().splitlines()[-1].startswith("RuntimeError: Engine core initialization failed.")
    assert "Traceback" not in p.stderr and "Starting vLLM server" not in p.stdout
    assert preflight.explain_launch(p.stdout + p.stderr)["issue"] == "startup_memory_short"

    first.proc.send_signal(signal.SIGKILL)   # dies without giving its share back
    first.proc.wait(timeout=10)
    second = start(sim_factory, unit, 0.9)
    assert get(second, "/sim/info")["unit"]["engines"] == []
    assert second.stop() == 0 and not list((unit / "engines").iterdir())   # a clean stop releases


def share(pm: PacingModel, n: int, ctx: float) -> float:
    """The model's share of the bus for a decode step of ``n`` streams at summed context ``ctx``."""
    read, written, _ = pm.step_traffic(n, 0, ctx)
    return (read + written) / pm.bw_bytes_s / pm.raw_step(n, 0, ctx)


def decode_once(sim, tokens: int) -> dict:
    """One forced single-stream generation; its /sim/requests row."""
    before = {r["id"] for r in get(sim, "/sim/requests")["requests"]}
    stream(sim, tokens)
    return next(r for r in get(sim, "/sim/requests")["requests"] if r["id"] not in before)


def stream(sim, tokens: int, until_stopped: bool = False) -> None:
    """One forced streamed generation of ``tokens``; ``until_stopped``: the server's stop ends it quietly."""
    c = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="x", max_retries=0)
    try:
        list(c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Go"}],
                                       max_tokens=tokens, stream=True, extra_body={"ignore_eos": True}))
    except openai.APIError:
        if not until_stopped:
            raise


def wait_for(sim, ok, timeout: float = 15.0) -> float:
    """Poll the engine's others_traffic_share until ``ok(value)``; returns the value."""
    deadline = time.monotonic() + timeout
    while True:
        seen = get(sim, "/sim/info")["unit"]["others_traffic_share"]
        if ok(seen) or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


@pytest.mark.sim
def test_a_busy_co_resident_engine_slows_the_others_decode_by_its_share_of_the_bus(sim_factory, tmp_path):
    unit = tmp_path / "unit"
    busy, probe = start(sim_factory, unit, 0.45), start(sim_factory, unit, 0.45)
    alone = decode_once(probe, 48)      # the neighbour is registered but idle: costs nothing
    assert get(probe, "/sim/info")["unit"]["slowdown"] == 1.0

    hw = json.loads((REPO_ROOT / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    pm = PacingModel(hw, json.loads(
        (REPO_ROOT / "sparkbench/data/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json").read_text()))
    expected_busy = share(pm, 3, 3 * 200)
    # steady load: three long streams the neighbour decodes until it is stopped (no client in the loop)
    for _ in range(3):
        threading.Thread(target=stream, args=(busy, 4000, True), daemon=True).start()
    seen = wait_for(probe, lambda v: v > 0.95 * expected_busy)
    shared = decode_once(probe, 48)
    assert seen == pytest.approx(expected_busy, rel=0.06)
    predicted = share(pm, 1, 32) + expected_busy    # T x max(1, own + others' demand)
    ratio = shared["paced_decode_s"] / alone["paced_decode_s"]
    assert ratio == pytest.approx(predicted, rel=0.05), (ratio, predicted)

    assert busy.stop() == 0             # a clean stop gives the share and the bus back
    wait_for(probe, lambda v: v == 0.0)
    assert get(probe, "/sim/info")["unit"]["engines"] == []
    again = decode_once(probe, 48)
    assert again["paced_decode_s"] == pytest.approx(alone["paced_decode_s"], rel=0.01)
