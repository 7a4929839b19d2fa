"""The run protocol (issue 12 item 2): measure.py's ``protocol`` block and flags, the simulator's
clock cap, its nvidia-smi / dmesg stand-ins, the plan's probe commands, the page-cache drop
outcome and the report's "Run protocol" section.

Oracles: real nvidia-smi / dmesg / /proc recordings from an NVIDIA H200 host
(tests/fixtures/measure, the command at the top of each file), the reference's figures for a
USB-PD-capped GB10 (60-80 % slower at 500-850 MHz; throttle check 1400 of 3003 MHz), and the
simulator's own pacing model.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sparkbench import measure as M
from sparkbench import plan as plan_mod
from sparkbench import result as result_mod
from sparkbench import settings as settings_mod
from sparkbench.errors import InputError
from sparkbench.report import numbers as rn
from sparkbench.report import sections
from sparkbench.twin.pacing import PacingModel
from vllm_sim import gpustate

from conftest import port_in
from helpers import REPO

FIX = REPO / "tests" / "fixtures" / "measure"
SIM = REPO / "scripts" / "vllm_sim"

SCHEMA = jsonschema.Draft202012Validator(json.loads((REPO / "schema" / "result.schema.json").read_text()))
HW = json.loads((REPO / "sparkbench/data/profiles/hardware" / "dgx-spark.json").read_text())
MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
MODEL_PROFILE = json.loads((REPO / "sparkbench/data/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json").read_text())


def samples_of(path: Path) -> list[dict]:
    """One telemetry sample per recorded nvidia-smi row (as Telemetry.sample_once builds them)."""
    out = []
    for i, row in enumerate(M.parse_nvidia_smi_csv(path.read_text())):
        s = M.aggregate_gpus([row])
        s.update(M.aggregate_clocks([row]))
        s["t"] = float(i)
        out.append(s)
    return out


# ---- parsing recorded output -----------------------------------------------------------------------


@pytest.mark.unit
def test_h200_clock_fields_header_and_noheader_agree() -> None:
    head = M.parse_nvidia_smi_csv((FIX / "nvidia-smi-h200-clocks-load-csv-header-units.txt").read_text())
    assert head[0]["clocks.current.graphics"] == 1440 and head[0]["clocks.max.graphics"] == 1980
    assert head[0]["clocks_event_reasons.active"] == "0x0000000000000004" and head[0]["power.draw"] == 691.03
    idle_h = M.parse_nvidia_smi_csv((FIX / "nvidia-smi-h200-clocks-idle-csv-header-units.txt").read_text())
    assert M.aggregate_clocks(idle_h) == {"graphics_clock_mhz": 345.0, "max_graphics_clock_mhz": 1980.0,
                                          "clock_event_reasons": ["0x0000000000000001"]}
    # the eight-field recordings (older query) still parse, with clocks.sm standing in for the graphics clock
    old = M.parse_nvidia_smi_csv((FIX / "nvidia-smi-h200-idle-noheader-nounits.txt").read_text())
    assert M.aggregate_clocks(old) == {"graphics_clock_mhz": 1980.0, "max_graphics_clock_mhz": None,
                                       "clock_event_reasons": []}
    # nvidia-smi prints the canonical name for the old query name clocks_throttle_reasons.active
    alias = M.parse_nvidia_smi_csv((FIX / "nvidia-smi-throttle-old-name-h200.txt").read_text())
    assert alias == [{"index": 0.0, "clocks_event_reasons.active": "0x0000000000000001", "pstate": "P0"}]


@pytest.mark.unit
def test_h200_under_power_cap_is_not_clock_capped() -> None:
    """Real H200 samples under a matmul load: the first one (0 %, 345 MHz, before the load reached the
    GPU) is not under load; the rest run 1425-1485 of 1980 MHz with the SW power cap reason 0x4:
    73 % of the maximum, above the 50 % threshold."""
    ss = samples_of(FIX / "nvidia-smi-h200-clocks-load-noheader-nounits.txt")
    clock = M.judge_clock(ss, ss[0])
    assert clock["samples_under_load"] == 5 and clock["idle_mhz"] == 345
    assert clock["under_load_mhz"] == 1440 and clock["max_mhz"] == 1980
    assert clock["share_of_max"] == pytest.approx(1440 / 1980, abs=1e-4)
    assert M.protocol_flags(clock, None, None) == []


def capped(clock_mhz: float, n: int, util: float | None = 96.0) -> list[dict]:
    return [{"graphics_clock_mhz": clock_mhz, "max_graphics_clock_mhz": 3003.0, "utilization_pct": util, "t": i}
            for i in range(n)]


@pytest.mark.unit
def test_clock_capped_rule_and_reason() -> None:
    idle = {"graphics_clock_mhz": 208.0, "max_graphics_clock_mhz": 3003.0, "utilization_pct": 0.0}
    idle_reads = [{**idle, "t": 99.0}] * 3  # idle readings in flight prove nothing: they are not counted
    clock = M.judge_clock(capped(850, 4) + idle_reads, idle)
    assert (clock["under_load_mhz"], clock["samples_under_load"], clock["idle_mhz"]) == (850, 4, 208)
    flags = M.protocol_flags(clock, None, None)
    assert [f["code"] for f in flags] == ["clock_capped"]
    assert flags[0]["reason"].startswith("clock 850 of 3003 MHz under load")
    # the threshold: 50 % of 3003 MHz = 1501.5; the throttle check's 1400 is below it, 1600 above
    assert M.protocol_flags(M.judge_clock(capped(1400, 4), idle), None, None)[0]["code"] == "clock_capped"
    assert M.protocol_flags(M.judge_clock(capped(1600, 4), idle), None, None) == []
    # one sample under load is not judged
    one = M.judge_clock(capped(850, 1), idle)
    assert M.protocol_flags(one, None, None) == [] and "only 1 sample" in one["reason"]
    # all samples idle: no figure, and the reason says why
    none = M.judge_clock(idle_reads, idle)
    assert none["under_load_mhz"] is None and "busy" in none["reason"]
    # no utilization reported: a clock above 1.5 x idle counts as busy, the idle clock does not
    no_util = M.judge_clock(capped(850, 3, util=None) + [{**idle, "utilization_pct": None, "t": 5}], idle)
    assert no_util["samples_under_load"] == 3


@pytest.mark.unit
def test_swap_and_kernel_flags() -> None:
    vm = M.read_vmstat(str(FIX / "vmstat-h200-pswp.txt"))
    assert vm == {"pswpin": 0, "pswpout": 0}
    assert M.protocol_flags(None, M.swap_delta(vm, {"pswpin": 100, "pswpout": 156}), None) == []
    moved = M.protocol_flags(None, M.swap_delta(vm, {"pswpin": 100, "pswpout": 157}), None)
    assert [f["code"] for f in moved] == ["host_swapped"] and "100 pages in, 157 out" in moved[0]["reason"]
    before = [x for x in (FIX / "dmesg-h200-tail.txt").read_text().splitlines() if not x.startswith("#")]
    xid = "[ 4321.000001] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    oom = "[ 4322.000002] Out of memory: Killed process 4242 (python3) total-vm:120000000kB, anon-rss:90000000kB"
    new = M.new_kernel_lines(before, before + [xid, oom])
    assert new == [xid, oom]
    kernel = {"xid": [x for x in new if M.XID_RE.search(x)], "oom": [x for x in new if M.OOM_RE.search(x)]}
    flags = M.protocol_flags(None, None, kernel)
    assert [f["code"] for f in flags] == ["gpu_xid", "oom_kill"] and "79, pid=1234" in flags[0]["reason"]
    # the recorded ring has NVRM lines, but none is an Xid
    assert not [x for x in before if M.XID_RE.search(x)] and [x for x in before if "NVRM" in x]


@pytest.mark.sim
def test_meminfo_and_unreadable_kernel_log(tmp_path: Path) -> None:
    mem = M.read_meminfo_fields(str(FIX / "meminfo-h200.txt"))
    assert mem == {"mem_total_mib": round(131961788 / 1024, 1), "mem_available_mib": round(131454216 / 1024, 1),
                   "mem_free_mib": round(130698036 / 1024, 1), "cached_mib": round(951296 / 1024, 1),
                   "swap_total_mib": 0.0, "swap_free_mib": 0.0, "swap_used_mib": 0.0}
    assert M.read_meminfo_fields(str(tmp_path / "absent")) is None
    lines, why = M.read_kernel_log(["sparkbench-no-such-dmesg"])
    assert lines is None and "not found" in why
    fake = tmp_path / "dmesg"
    fake.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    lines, why = M.read_kernel_log([str(fake)])
    assert lines is None and why.endswith("exited 1: dmesg: read kernel buffer failed: Operation not permitted")


@pytest.mark.sim
def test_telemetry_falls_back_to_the_field_names_the_driver_knows(tmp_path: Path) -> None:
    """A driver older than 535.54.03 rejects clocks_event_reasons.active (exit 2, as recorded in
    nvidia-smi-invalid-field-stderr.txt); the sampler retries with clocks_throttle_reasons.active."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\ncase \"$1\" in *clocks_event_reasons*) echo 'Field \"clocks_event_reasons.active\" is not a "
        "valid field to query.' >&2; exit 2;; esac\n"
        "echo '0, NVIDIA GB10, 41.25, 57, 2405, 96, [N/A], [N/A], 2405, 3003, 0x0000000000000000'\n")
    fake.chmod(0o755)
    tel = M.Telemetry([str(fake)])
    assert tel.probe() is None
    assert tel.query[-1] == "clocks_throttle_reasons.active"
    assert tel.idle["graphics_clock_mhz"] == 2405 and tel.idle["clock_event_reasons"] == ["0x0000000000000000"]
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'Error: No such container: sparkbench-vllm-x' >&2\nexit 1\n")
    broken.chmod(0o755)
    why = M.Telemetry([str(broken)]).probe()
    assert why.endswith("exited 1: Error: No such container: sparkbench-vllm-x")


# ---- the simulator ----------------------------------------------------------------------------------

Q = ",".join(M.SMI_FIELDS)


def stand_in(tool: str, env: dict[str, str], *args: str) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SIM_")}
    full.update(env)
    p = subprocess.run([sys.executable, str(SIM), tool, *args], capture_output=True, text=True, env=full, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.sim
def test_nvidia_smi_stand_in_idle_and_under_load(tmp_path: Path) -> None:
    state = tmp_path / "gpu.json"
    env = {"VLLM_SIM_GPU_STATE_FILE": str(state)}

    def row(extra: dict[str, str]) -> dict:
        out = stand_in("nvidia-smi", {**env, **extra}, f"--query-gpu={Q}", "--format=csv,noheader,nounits")
        return M.parse_nvidia_smi_csv(out)[0]

    idle = row({})  # no state file: nothing runs
    assert (idle["clocks.current.graphics"], idle["clocks.max.graphics"], idle["utilization.gpu"]) == (208, 3003, 0)
    assert idle["clocks_event_reasons.active"] == "0x0" and idle["memory.used"] is None
    gs = gpustate.GpuState(str(state))  # this process plays the engine
    gs.update(1, 1)
    load = row({})
    assert (load["clocks.current.graphics"], load["utilization.gpu"], load["power.draw"]) == (2450, 96, 86.0)
    cap = row({"VLLM_SIM_CLOCK_CAP_MHZ": "850"})
    assert cap["clocks.current.graphics"] == 850 and cap["clocks_event_reasons.active"] == "0x0"
    assert 15 < cap["power.draw"] < 30  # a capped GX10 drew 15-18 W at 630-650 MHz
    head = stand_in("nvidia-smi", env, "--query-gpu=clocks.sm,clocks_throttle_reasons.active", "--format=csv")
    assert head.splitlines()[0] == "clocks.current.sm [MHz], clocks_event_reasons.active"
    gs.update(0)
    assert row({})["clocks.current.graphics"] == 208
    # dmesg: boot lines only until a request has run with the Xid knob; then one stable Xid line
    assert "Xid" not in stand_in("dmesg", {"VLLM_SIM_GPU_STATE_FILE": str(tmp_path / "none.json"),
                                           "VLLM_SIM_FAULT_XID": "79"})
    first = stand_in("dmesg", {**env, "VLLM_SIM_FAULT_XID": "79"})
    assert "NVRM: Xid (PCI:000f:01:00): 79," in first and "GPU has fallen off the bus." in first
    assert stand_in("dmesg", {**env, "VLLM_SIM_FAULT_XID": "79"}) == first
    assert "Xid" not in stand_in("dmesg", env)


@pytest.mark.unit
def test_clock_cap_slowdown_calibration() -> None:
    """Reference §5.3: clocks capped at 500-850 MHz cost 60-80 % of the performance; caps from 2400 MHz change little."""
    def rate(cap: float | None, n: int = 1) -> float:
        return PacingModel(HW, MODEL_PROFILE, clock_cap_mhz=cap).expected_rate(n)

    full = rate(None)
    for cap in (500, 650, 850):
        assert 0.60 <= 1 - rate(cap) / full <= 0.80, cap
    assert 1 - rate(850) / full == pytest.approx(0.615, abs=0.005)
    assert 1 - rate(2400) / full < 0.03 and rate(3003) == full and rate(2450) == full
    assert 0.60 <= 1 - rate(850, 8) / rate(None, 8) <= 0.80
    # the rate override is set on the uncapped step: a capped host stays slower at the same knob
    pm = PacingModel(HW, MODEL_PROFILE, clock_cap_mhz=850)
    pm.set_rate_override(150.0)
    assert pm.expected_rate(1) == pytest.approx(150.0 * 1 / (0.15 + 0.85 * 2450 / 850))


# ---- wiring: plan, result, report ---------------------------------------------------------------------


@pytest.mark.unit
def test_probe_commands_per_host_kind() -> None:
    base = {"sparkbench_gpu_less": False, "spark_host_gpu_probe": ""}
    assert plan_mod.probe_commands(base, "c") == {"nvidia_smi": None, "kernel_log": None}
    sim = plan_mod.probe_commands({**base, "sparkbench_gpu_less": True}, "sparkbench-vllm-spark-sim01")
    assert sim == {"nvidia_smi": "docker exec sparkbench-vllm-spark-sim01 nvidia-smi",
                   "kernel_log": "docker exec sparkbench-vllm-spark-sim01 dmesg"}
    assert plan_mod.probe_commands({**base, "spark_host_gpu_probe": "none", "sparkbench_gpu_less": True}, "c") == {
        "nvidia_smi": "none", "kernel_log": None}
    with pytest.raises(InputError, match="spark_host_gpu_probe"):
        plan_mod.probe_commands({**base, "spark_host_gpu_probe": "gpu"}, "c")
    argv = settings_mod.measure_argv({}, python="python3", script="m.py", base_url="http://x", model="m",
                                     quality_file="q.json", sandbox_image="i", **sim)
    assert argv[argv.index("--nvidia-smi") + 1] == sim["nvidia_smi"]
    assert argv[argv.index("--kernel-log") + 1] == sim["kernel_log"]
    args = M.build_parser().parse_args(argv[2:])
    assert (args.nvidia_smi, args.kernel_log) == (sim["nvidia_smi"], sim["kernel_log"])


@pytest.mark.unit
def test_drop_caches_outcome_reaches_the_protocol() -> None:
    doc = {"status": "complete", "protocol": {"flags": [], "drop_caches": None}}
    out = result_mod.with_drop_caches(doc, {"requested": "True", "done": "False",
                                            "reason": "could not drop the page cache: /bin/sh: 1: cannot create "
                                                      "/proc/sys/vm/drop_caches: Read-only file system"})
    assert out["protocol"]["drop_caches"] == {"requested": True, "done": False, "reason": (
        "could not drop the page cache: /bin/sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only file system")}
    done = result_mod.with_drop_caches({"status": "failed"}, {"requested": True, "done": True, "reason": "None"})
    assert done["protocol"] == {"drop_caches": {"requested": True, "done": True, "reason": None}, "flags": []}
    assert result_mod.with_drop_caches(doc, {}) is doc


@pytest.mark.unit
def test_report_shows_the_flag_reason() -> None:
    reason = "clock 850 of 3003 MHz under load (28 % of the maximum, below 50 %; median of 6 samples)"
    doc = {"host": "spark-sim03", "variant": {"name": "nvidia-bare", "build": "nvidia"}, "status": "complete",
           "simulated": True,
           "protocol": {"memory_before": {"mem_available_mib": 102400.0, "cached_mib": 2048.0},
                        "memory_after": {"mem_available_mib": 101376.0, "cached_mib": 2048.0},
                        "swap": {"pswpin": 0, "pswpout": 0, "source": "/proc/vmstat"},
                        "clock": {"max_mhz": 3003.0, "under_load_mhz": 850.0, "share_of_max": 0.283,
                                  "samples_under_load": 6, "idle_mhz": 208.0, "reason": None},
                        "kernel_log": None, "kernel_log_reason": "dmesg exited 1: Operation not permitted",
                        "drop_caches": {"requested": True, "done": False, "reason": "read-only"},
                        "flags": [{"code": "clock_capped", "reason": reason}]}}
    data = {"protocol": rn.protocol_rows([doc])}
    table = sections.protocol_table(data)
    row = table.rows[0]
    assert table.title == "Run protocol" and row[0] == "spark-sim03"
    assert row[2] == "850 of 3003 (6 samples)" and row[3] == "100.0 → 99.0"
    assert row[6] == "dmesg exited 1: Operation not permitted" and row[7] == "not done: read-only"
    assert row[8] == f"clock_capped: {reason}"
    assert rn.variant_row(doc, [doc])["protocol_flags"] == f"clock_capped: {reason}"
    assert sections.protocol_table({"protocol": []}) is None


# ---- end to end: measure.py against a capped simulator ------------------------------------------------


def port_in_range() -> int:
    """A free port in 18600-18699 (this file's range)."""
    return port_in(18600, 18700)


@pytest.mark.sim
def test_measure_flags_a_capped_simulator(sim_factory, tmp_path: Path) -> None:
    state = tmp_path / "gpu.json"
    knobs = {"VLLM_SIM_GPU_STATE_FILE": str(state), "VLLM_SIM_CLOCK_CAP_MHZ": "850", "VLLM_SIM_FAULT_XID": "79"}
    sim = sim_factory(model=MODEL, args=["--max-num-batched-tokens", "4096"],
                      env={**knobs, "VLLM_SIM_RATE": "150"}, port=port_in_range())
    # the stand-ins see the knobs the way `docker exec` would see the container's environment
    pre = " ".join(f"{k}={v}" for k, v in knobs.items())
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SIM_") and k != "SPARKBENCH_API_KEY"}
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "measure.py"), "--base-url", sim.base_url,
                        "--runs", "3", "--warmup", "0", "--concurrency", "none", "--output-tokens", "120",
                        "--nvidia-smi", f"env {pre} {sys.executable} {SIM} nvidia-smi",
                        "--kernel-log", f"env {pre} {sys.executable} {SIM} dmesg", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    errors = sorted(SCHEMA.iter_errors(doc), key=str)
    assert not errors, errors[:3]
    pr = doc["protocol"]
    codes = {f["code"]: f["reason"] for f in pr["flags"]}
    assert set(codes) == {"clock_capped", "gpu_xid"}
    assert codes["clock_capped"].startswith("clock 850 of 3003 MHz under load")
    assert "NVRM: Xid (PCI:000f:01:00): 79" in codes["gpu_xid"]
    assert {w["code"] for w in doc["warnings"]} >= {"clock_capped", "gpu_xid"}
    c = pr["clock"]
    assert (c["under_load_mhz"], c["max_mhz"], c["idle_mhz"]) == (850, 3003, 208) and c["samples_under_load"] >= 2
    assert pr["memory_before"]["mem_total_mib"] > 0 and pr["memory_after"]["mem_available_mib"] > 0
    assert pr["swap"]["source"] == "/proc/vmstat" and pr["kernel_log"]["xid"] and pr["drop_caches"] is None
    ph = doc["telemetry"]["phases"]["single"]
    assert ph["graphics_clock_mhz"]["p50"] == 850 and ph["max_graphics_clock_mhz"] == 3003
    # the phase's plain mean may include a sample taken between two requests (idle, 208 MHz):
    # that is why the verdict reads the clock under load, never the phase mean
    assert ph["clock_event_reasons"] == ["0x0"] and ph["sm_clock_mhz"]["max"] == 850
    # the simulated figures: the rate knob's 150 tok/s times the capped decode factor
    assert doc["single"]["decode_tok_s_median"] == pytest.approx(150 / (0.15 + 0.85 * 2450 / 850), rel=0.03)


@pytest.mark.sim
def test_bad_command_options_are_argparse_errors() -> None:
    for args, text in ((["--nvidia-smi", "docker exec 'x"], "argument --nvidia-smi: \"docker exec 'x\" is not a command line"),
                       (["--kernel-log", "  "], "argument --kernel-log: --kernel-log needs a command")):
        p = subprocess.run([sys.executable, str(REPO / "scripts" / "measure.py"), "--base-url", "http://127.0.0.1:9",
                            "--out", "-", *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and text in p.stderr and "Traceback" not in p.stderr
