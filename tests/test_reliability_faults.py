"""Faults: one real bench.yml run over the fault fleet (tests/fixtures/reliability/inventory,
group rel_faults + rel_down). Simulator fault knobs (VLLM_SIM_FAULT_*) per variant on fault-a and fault-b;
the test itself `docker kill`s fault-kill's server while measure.py runs and holds fault-port's
port; fault-disk demands more disk than exists; fault-noimage names an image that cannot be
pulled; rel-down is an SSH host on loopback where nothing listens. Every other variant and host
completes, failures keep their partial figures, and the report names what failed and why."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request

import jsonschema
import pytest

from reliability import REPO, remove_containers, run_playbook

pytestmark = pytest.mark.ansible

HOSTS = ["fault-a", "fault-b", "fault-kill", "fault-port", "fault-disk", "fault-noimage", "rel-down"]
KILL_PORT = 18631
BUSY_PORT = 18632


def _non_loopback_ip() -> str | None:
    """An address of this machine that is not loopback (None when it has none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent for UDP connect
            ip = s.getsockname()[0]
        return None if ip.startswith("127.") else ip
    except OSError:
        return None


class Killer(threading.Thread):
    """Waits until fault-kill's 'killed' variant is serving and measure.py has a request in
    flight, records how the server is exposed, then `docker kill`s the container."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.killed_at: float | None = None
        self.args: list[str] = []
        self.wide_refused: bool | None = None

    def run(self) -> None:
        name = "sparkbench-vllm-fault-kill"
        while not self.stop.is_set():
            insp = subprocess.run(["docker", "inspect", "--format",
                                   '{{index .Config.Labels "sparkbench.variant"}} {{json .Args}}', name],
                                  capture_output=True, text=True)
            if insp.returncode == 0 and insp.stdout.startswith("killed "):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{KILL_PORT}/sim/requests", timeout=2) as r:
                        reqs = json.loads(r.read())
                except OSError:
                    reqs = None
                items = reqs.get("requests", reqs) if isinstance(reqs, dict) else reqs
                if items:
                    self.args = json.loads(insp.stdout.split(" ", 1)[1])
                    ip = _non_loopback_ip()
                    if ip:
                        try:
                            socket.create_connection((ip, KILL_PORT), timeout=2).close()
                            self.wide_refused = False
                        except OSError:
                            self.wide_refused = True
                    subprocess.run(["docker", "kill", name], capture_output=True)
                    self.killed_at = time.time()
                    return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    busy = socket.socket()
    busy.bind(("127.0.0.1", BUSY_PORT))
    busy.listen()
    killer = Killer()
    killer.start()
    try:
        run = run_playbook(tmp, "rel_faults:rel_down", "relfaults", timeout=480)
        run.killer = killer  # type: ignore[attr-defined]
        yield run
    finally:
        killer.stop.set()
        busy.close()
        remove_containers(HOSTS)


def test_no_traceback_and_the_run_reaches_the_report(fault_run) -> None:
    assert "Traceback" not in fault_run.output
    assert (fault_run.results / "relfaults" / "report.md").is_file()


def test_healthy_variants_complete_beside_the_faults(fault_run) -> None:
    assert fault_run.result("fault-a", "nvidia-bare")["status"] == "complete"
    # measured after the killed variant on the same host
    assert fault_run.result("fault-kill", "nvidia-bare")["status"] == "complete"


def test_server_crash_at_start_is_a_launch_failure_with_the_log(fault_run) -> None:
    doc = fault_run.result("fault-a", "crash-start")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "launch"
    assert "exited" in doc["failure"]["reason"] or doc["failure"]["log_excerpt"]
    assert doc["failure"]["remedy"]


def test_crash_mid_measurement_keeps_the_partial_result(fault_run) -> None:
    doc = fault_run.result("fault-a", "crash-mid")
    assert doc["status"] == "incomplete" and doc["failure"]["stage"] == "measure"
    # the single-stream figure measured before the crash is kept
    assert doc["single"]["decode_tok_s_median"] and doc["single"]["decode_tok_s_median"] > 0
    assert doc["errors"]


def test_stall_is_bounded_by_the_stall_timeout(fault_run) -> None:
    doc = fault_run.result("fault-b", "stall")
    assert doc["status"] == "incomplete" and doc["failure"]["stage"] == "measure"
    assert doc["single"]["decode_tok_s_median"] > 0
    assert any("stall" in (e.get("message") or "").lower() or "no byte" in (e.get("message") or "").lower()
               for e in doc["errors"]), doc["errors"]


def test_http_500s_fail_the_variant_with_the_server_message(fault_run) -> None:
    doc = fault_run.result("fault-b", "http500")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "measure"
    assert "500" in doc["failure"]["reason"]


def test_gated_model_without_token_fails_with_the_token_remedy(fault_run) -> None:
    doc = fault_run.result("fault-b", "gated")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "preflight"
    assert "gated" in doc["failure"]["reason"] and "HF_TOKEN" in doc["failure"]["remedy"]
    # the host went on with its other variants after the refused download
    assert fault_run.result("fault-b", "stall")["status"] == "incomplete"


def test_container_killed_from_outside_is_recorded_and_the_host_goes_on(fault_run) -> None:
    assert fault_run.killer.killed_at is not None, "the test never saw the 'killed' variant measuring"
    doc = fault_run.result("fault-kill", "killed")
    assert doc["status"] in ("incomplete", "failed") and doc["failure"]["stage"] == "measure"
    assert doc["failure"]["reason"]


def test_server_listens_on_loopback_by_default(fault_run) -> None:
    args = fault_run.killer.args
    assert args[args.index("--host") + 1] == "127.0.0.1"
    if fault_run.killer.wide_refused is None:
        pytest.skip("this machine has no non-loopback address to try")
    assert fault_run.killer.wide_refused is True


def test_port_already_in_use_is_named_with_the_fix(fault_run) -> None:
    doc = fault_run.result("fault-port", "nvidia-bare")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "launch"
    assert "already in use" in doc["failure"]["reason"] and "vllm_server_port" in doc["failure"]["remedy"]


def test_too_little_disk_stops_the_host_before_any_download(fault_run) -> None:
    msg = fault_run.fatal("fault-disk")
    assert "GB free" in msg and "GB needed" in msg and "spark_host_hf_cache" in msg
    assert "sparkbench-download-fault-disk" not in fault_run.created
    assert "sparkbench-vllm-fault-disk" not in fault_run.created


def test_image_that_cannot_be_pulled_stops_the_host_before_a_server(fault_run) -> None:
    msg = fault_run.fatal("fault-noimage")
    assert "Error pulling image sparkbench/not-present-anywhere:v0" in msg
    assert "sparkbench-vllm-fault-noimage" not in fault_run.created


def test_unreachable_host_does_not_stop_the_fleet(fault_run) -> None:
    msg = fault_run.fatal("rel-down")
    assert "UNREACHABLE" in msg and ("18799" in msg or "Connection refused" in msg), msg
    assert not (fault_run.results / "relfaults" / "rel-down").exists()
    assert fault_run.result("fault-a", "nvidia-bare")["status"] == "complete"


def test_report_lists_hosts_without_results_with_the_reason(fault_run) -> None:
    """Hosts that failed as a whole (no result file) appear in report.md under "Hosts without
    results" with the reason bench.yml recorded: the connection error, the disk check, the pull."""
    report = (fault_run.results / "relfaults" / "report.md").read_text(encoding="utf-8")
    assert "## Hosts without results" in report, report[-3000:]
    section = report.split("## Hosts without results", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1] for cells in
            ([c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| host "))}
    assert set(rows) == {"rel-down", "fault-disk", "fault-noimage"}, rows
    assert rows["rel-down"].startswith("unreachable:") and ("18799" in rows["rel-down"]
                                                             or "refused" in rows["rel-down"]), rows
    assert "GB free" in rows["fault-disk"] and "GB needed" in rows["fault-disk"], rows
    assert "Error pulling image sparkbench/not-present-anywhere:v0" in rows["fault-noimage"], rows
    assert "- rel-down: no results — unreachable:" in report
    # A host that failed in provisioning still has a document per planned variant (stage host),
    # each matching the schema; an unreachable host has none (nothing of it was planned to run).
    schema = json.loads((REPO / "schema" / "result.schema.json").read_text())
    docs = sorted((fault_run.results / "relfaults" / "fault-disk").glob("*.json"))
    assert docs
    for path in docs:
        doc = json.loads(path.read_text())
        jsonschema.validate(doc, schema)
        assert doc["status"] == "failed" and doc["failure"]["stage"] == "host" and "GB needed" in doc["failure"]["reason"]


def test_report_shows_each_failure_and_why(fault_run) -> None:
    report = (fault_run.results / "relfaults" / "report.md").read_text(encoding="utf-8")
    for variant in ("crash-start", "crash-mid", "stall", "http500", "gated", "killed"):
        assert variant in report
    assert "already in use" in report and "gated" in report
