"""sparkbench.cluster (spec, ray status, check, result block), the Ray known issues and the
ray_cluster filter adapters. The role itself runs on a real two-node Ray cluster in
tests/test_sim_pair_playbook.py (bench.yml -l sim_pair: start, check, a worker that cannot join, stop).

The ``ray status`` fixtures: ``STATUS_2X`` is the sample of shared/reference/multispark.md §8
verbatim (Ray 2.60.0, two CPU-only nodes); ``STATUS_2X_V`` was printed by ``ray status -v`` of
Ray 2.60.0 here (one node, a placement group holding its GPU); ``STATUS_LEGACY`` is the older
format the reference names (``Healthy:`` / ``Usage:`` / ``Demands:``, Ray 1.x as in
ray-project/raydp #89), rebuilt in that layout; ``STATUS_V2_NODES`` has the v2 autoscaler's
per-node blocks (``Node: <instance> (<type>)`` / `` Id: <node id>``, ray/autoscaler/v2/utils.py).
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from sparkbench import cluster
from sparkbench import preflight as vp
from sparkbench.errors import InputError

from helpers import REPO

ISSUES = yaml.safe_load((REPO / "sparkbench/data/known_issues.yml").read_text())
IMAGE = "sparkbench/vllm-sim-ray:v0.25.0"

STATUS_2X = """\
======== Autoscaler status: 2026-12-01 11:44:18.712931 ========
Node status
---------------------------------------------------------------
Active:
 1 node_85d1f18c…
 1 node_65f96afe…
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/6.0 CPU
 0.0/2.0 GPU
 0B/32.16GiB memory
 0B/13.78GiB object_store_memory

From request_resources:
 (none)
Pending Demands:
 (no resource demands)
"""

STATUS_2X_V = """\
======== Autoscaler status: 2026-12-01 19:34:28.069652 ========
GCS request time: 0.002239s
Node Provider non_terminated_nodes time: 0.000011s

Node status
---------------------------------------------------------------
Active:
 1 node_cd2dc58fa833bf2d7fb762a23cfc3fdc1c1854482d9d91a258df3180
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/1.0 CPU
 1.0/1.0 GPU (1.0 used of 1.0 reserved in placement groups)
 0B/23.23GiB memory
 0B/76.29MiB object_store_memory

From request_resources:
 (none)
Pending Demands:
 (no resource demands)

Node: cd2dc58fa833bf2d7fb762a23cfc3fdc1c1854482d9d91a258df3180 (node_cd2dc58fa833bf2d7fb762a23cfc3fdc1c1854482d9d91a258df3180)
 Usage:
  0.0/1.0 CPU
  1.0/1.0 GPU (1.0 used of 1.0 reserved in placement groups)
  0B/23.23GiB memory
  0B/76.29MiB object_store_memory
"""

STATUS_LEGACY = """\
======== Autoscaler status: 2022-01-13 06:44:54.591297 ========
Node status
---------------------------------------------------------------
Healthy:
 1 node_6e5c0d3bd3c5d5e5e1a9d3b1
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 2.0/8.0 CPU
 0.0/1.0 GPU
 0.00/18.540 GiB memory
 0.00/9.270 GiB object_store_memory

Demands:
 {'CPU': 1.0}: 2+ pending tasks/actors
"""

STATUS_V2_NODES = """\
======== Autoscaler status: 2026-12-01 12:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 1 node_aaaa
Idle:
 1 node_bbbb
Pending:
 (no pending nodes)
Recent failures:
 worker: NodeTerminated (instance_id: i-123)

Resources
---------------------------------------------------------------
Total Usage:
 1.0/2.0 GPU
From request_resources:
 (none)
Pending Demands:
 {'GPU': 1.0} * 3 (STRICT_SPREAD): 1+ pending placement groups

Node: i-aaaa (head)
 Id: aaaa
 Usage:
  1.0/1.0 GPU
 Activity:
  (no activity)

Node: i-bbbb (worker)
 Id: bbbb
 Usage:
  0.0/1.0 GPU
"""


# ---- ray status ---------------------------------------------------------------------------------

@pytest.mark.unit
def test_parse_ray_status_2x_reference_sample():
    s = cluster.parse_ray_status(STATUS_2X)
    assert s["format"] == "2.x-active" and s["nodes_active"] == 2
    assert s["node_ids"] == ["85d1f18c…", "65f96afe…"]
    assert (s["gpus_used"], s["gpus_total"], s["cpus_used"], s["cpus_total"]) == (0.0, 2.0, 0.0, 6.0)
    assert s["pending_nodes"] == [] and s["failures"] == [] and s["pending_demands"] == []
    assert s["resources"]["memory"] == {"used": "0B", "total": "32.16GiB"} and s["per_node"] == {}


@pytest.mark.unit
def test_parse_ray_status_verbose_per_node_blocks_and_placement_group_note():
    s = cluster.parse_ray_status(STATUS_2X_V)
    nid = "cd2dc58fa833bf2d7fb762a23cfc3fdc1c1854482d9d91a258df3180"
    assert s["nodes_active"] == 1 and s["node_ids"] == [nid]
    assert (s["gpus_used"], s["gpus_total"]) == (1.0, 1.0)
    assert "reserved in placement groups" in s["resources"]["GPU"]["note"]
    node = s["per_node"][nid]
    assert (node["gpus_used"], node["gpus_total"], node["cpus_total"]) == (1.0, 1.0, 1.0)
    assert node["name"] == "node_" + nid


@pytest.mark.unit
def test_parse_ray_status_legacy_healthy_format():
    s = cluster.parse_ray_status(STATUS_LEGACY)
    assert s["format"] == "legacy-healthy" and s["nodes_active"] == 1
    assert (s["cpus_used"], s["cpus_total"], s["gpus_total"]) == (2.0, 8.0, 1.0)
    assert s["pending_demands"] == ["{'CPU': 1.0}: 2+ pending tasks/actors"]


@pytest.mark.unit
def test_parse_ray_status_idle_nodes_failures_and_v2_node_blocks():
    s = cluster.parse_ray_status(STATUS_V2_NODES)
    assert s["nodes_active"] == 2 and s["node_ids"] == ["aaaa", "bbbb"]  # idle nodes are alive
    assert s["failures"] == ["worker: NodeTerminated (instance_id: i-123)"]
    assert s["pending_demands"][0].startswith("{'GPU': 1.0} * 3")
    assert s["per_node"]["aaaa"]["instance_id"] == "i-aaaa" and s["per_node"]["bbbb"]["gpus_used"] == 0.0


@pytest.mark.unit
def test_parse_ray_status_of_no_ray_output():
    s = cluster.parse_ray_status("Error: could not connect to GCS at 10.0.0.1:6379")
    assert s["format"] is None and s["nodes_active"] == 0 and s["gpus_total"] is None


# ---- world size -------------------------------------------------------------------------------

@pytest.mark.unit
def test_world_size_and_cluster_variants():
    assert cluster.world_size({}) == (1, 1)
    assert cluster.world_size({"tensor-parallel-size": 2, "distributed-executor-backend": "ray"}) == (2, 1)
    assert cluster.world_size({"pipeline_parallel_size": "2"}) == (1, 2)
    assert cluster.is_cluster_variant({"tensor-parallel-size": 2}) is True
    assert cluster.is_cluster_variant({"tensor-parallel-size": 2}, gpus_per_node=2) is False
    assert cluster.is_cluster_variant({"max-num-seqs": 8}) is False
    assert cluster.gpus_per_node({}) == 1 and cluster.gpus_per_node({"gpus_per_node": 8}) == 8
    with pytest.raises(InputError, match="args.tensor-parallel-size"):
        cluster.world_size({"tensor-parallel-size": 0})
    with pytest.raises(InputError, match="gpus_per_node"):
        cluster.gpus_per_node({"gpus_per_node": "x"})


# ---- the spec -----------------------------------------------------------------------------------

SIM_VARS = {"ray_cluster_interface": "eth0", "ray_cluster_docker_network": "sparkbench-pair",
            "ray_cluster_subnet": "172.31.250.0/24", "ray_cluster_serve_port": 8110, "ray_cluster_num_cpus": 1,
            "ray_cluster_object_store_bytes": 80000000, "bench_image": IMAGE, "sparkbench_gpu_less": True,
            "vllm_server_env": {"VLLM_SIM_LOAD_SECONDS": "1"}}


def sim_members(**override):
    a = {**SIM_VARS, "ray_cluster_node_ip": "172.31.250.11", **override.get("a", {})}
    b = {**SIM_VARS, "ray_cluster_node_ip": "172.31.250.12", **override.get("b", {})}
    return [("spark-sim11", a), ("spark-sim12", b)]


def real_members(**b_override):
    base = {"ray_cluster_interface": "enp1s0f1np1", "bench_image": "nvcr.io/nvidia/vllm:26.05-py3"}
    return [("spark01", {**base, "ray_cluster_node_ip": "192.168.100.10"}),
            ("spark02", {**base, "ray_cluster_node_ip": "192.168.100.11", **b_override})]


@pytest.mark.unit
def test_cluster_spec_of_the_sim_pair():
    spec = cluster.cluster_spec("sim_pair", sim_members())
    assert spec["head"] == "spark-sim11" and spec["members"] == ["spark-sim11", "spark-sim12"]
    assert spec["head_address"] == "172.31.250.11:6379" and spec["ray_port"] == 6379
    assert spec["network"] == {"mode": "bridge", "docker_network": "sparkbench-pair", "subnet": "172.31.250.0/24"}
    assert spec["probe"] == "container" and spec["join_timeout_s"] == 60
    head, worker = spec["nodes"]
    assert head["container"] == "sparkbench-ray-spark-sim11" and head["role"] == "head" and worker["role"] == "worker"
    assert head["env"] == {"VLLM_HOST_IP": "172.31.250.11", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
                           "UCX_NET_DEVICES": "eth0", "TP_SOCKET_IFNAME": "eth0", "OMPI_MCA_btl_tcp_if_include": "eth0",
                           "RAY_memory_monitor_refresh_ms": "0", "MASTER_ADDR": "172.31.250.11",
                           "VLLM_SIM_LOAD_SECONDS": "1"}
    assert worker["env"]["VLLM_HOST_IP"] == "172.31.250.12" and worker["env"]["MASTER_ADDR"] == "172.31.250.11"
    assert head["command"] == ["ray", "start", "--block", "--head", "--port=6379", "--node-ip-address=172.31.250.11",
                               "--num-gpus=1", "--num-cpus=1", "--object-store-memory=80000000",
                               "--include-dashboard=false", "--disable-usage-stats"]
    assert worker["command"][:4] == ["ray", "start", "--block", "--address=172.31.250.11:6379"]
    assert "--include-dashboard=false" not in worker["command"]
    assert head["published_ports"] == ["127.0.0.1:8110:8000"] and worker["published_ports"] == []
    assert head["ipv4_address"] == "172.31.250.11" and head["gpus"] is False and head["shm_size"] == "512m"
    assert spec["serve"] == {"container": "sparkbench-ray-spark-sim11", "host": "127.0.0.1", "port": 8110,
                             "base_url": "http://127.0.0.1:8110", "listen_host": "0.0.0.0", "listen_port": 8000}
    json.dumps(spec)  # plain data, for the plan and the result


@pytest.mark.unit
def test_cluster_spec_host_network_probed_addresses_and_prefix():
    members = [("spark01", {"ray_cluster_interface": "enp1s0f1np1", "ray_cluster_container_prefix": "raytest"}),
               ("spark02", {"ray_cluster_interface": "enp1s0f1np1"})]
    spec = cluster.cluster_spec("pair", members)
    assert spec["resolved"] is False and spec["nodes"][0]["command"] is None and spec["network"]["mode"] == "host"
    assert spec["probe"] == "host" and spec["nodes"][0]["container"] == "raytest-spark01"
    done = cluster.with_addresses(spec, {"spark01": "192.168.100.10", "spark02": "192.168.100.11"})
    assert done["resolved"] and done["head_address"] == "192.168.100.10:6379"
    assert done["nodes"][1]["env"]["VLLM_HOST_IP"] == "192.168.100.11" and done["nodes"][0]["shm_size"] == "10.24g"
    assert done["serve"]["listen_host"] == "127.0.0.1" and done["nodes"][0]["gpus"] is True
    with pytest.raises(InputError, match="spark02 has no IPv4"):
        cluster.with_addresses(spec, {"spark01": "192.168.100.10"})
    with pytest.raises(InputError, match="same address"):
        cluster.with_addresses(spec, {"spark01": "192.168.100.10", "spark02": "192.168.100.10"})


@pytest.mark.unit
@pytest.mark.parametrize("members, match", [
    ([("spark01", {"ray_cluster_interface": "enp1s0f1np1"})], "needs at least 2"),
    (real_members(ray_cluster_interface=""), "ray_cluster_interface is not set for host spark02"),
    (real_members(ray_cluster_node_ip="192.168.100.10"), "ray_cluster_node_ip 192.168.100.10 is set on both"),
    (real_members(ray_cluster_interface="enP2p1s0f1np1"), "enP2p.*ray_enp2p_twin.*enp1s0f1np1"),
    (real_members(ray_cluster_node_ip="192.168.100.300"), "not an IPv4 address"),
    (real_members(ray_cluster_docker_network="x"), "ray_cluster_docker_network is x on spark02"),
    (real_members(vllm_server_env={"VLLM_HOST_IP": "10.0.0.1"}), "remove VLLM_HOST_IP from vllm_server_env"),
    (sim_members(b={"ray_cluster_node_ip": "172.31.99.12"}), "outside ray_cluster_subnet"),
    (sim_members(b={"ray_cluster_node_ip": ""}), "ray_cluster_node_ip is not set for host spark-sim12"),
    (sim_members(a={"ray_cluster_subnet": ""}), "ray_cluster_subnet is not set"),
    (sim_members(a={"ray_cluster_port": "x"}), "ray_cluster_port of host spark-sim11"),
])
def test_cluster_spec_errors_name_the_variable_and_the_fix(members, match):
    with pytest.raises(InputError, match=match):
        cluster.cluster_spec("pair", members)


@pytest.mark.unit
def test_cluster_spec_accepts_an_enp2p_twin_when_told():
    spec = cluster.cluster_spec("pair", real_members(ray_cluster_interface="enP2p1s0f1np1", ray_cluster_allow_enp2p=True))
    assert spec["nodes"][1]["env"]["NCCL_SOCKET_IFNAME"] == "enP2p1s0f1np1"


# ---- the check ----------------------------------------------------------------------------------

def good_inputs(spec):
    probe = {"ray_version": "2.60.0",
             "nodes": [{"node_id": "n1", "address": "172.31.250.11", "hostname": "spark-sim11", "alive": True, "gpus": 1.0},
                       {"node_id": "n2", "address": "172.31.250.12", "hostname": "spark-sim12", "alive": True, "gpus": 1.0}],
             "placement_groups": [], "actors": []}
    status = cluster.parse_ray_status(STATUS_2X)
    iface = {"name": "eth0", "up": True, "ipv4": None, "prefixlen": 24, "mtu": 1500}
    facts = {n["host"]: {"image_id": "sha256:1", "image_digest": None, "driver": "580.95.05",
                         "interface": {**iface, "ipv4": n["address"]}, "other_ipv4": [], "link_speed_mbps": 10000,
                         "container": {"exists": True, "running": True}} for n in spec["nodes"]}
    facts["spark-sim11"]["bandwidth"] = {"method": "iperf3", "gbps": 20.0, "note": "container network (GPU-less hosts), not a CX-7 link"}
    return status, probe, facts


@pytest.mark.unit
def test_check_passes_a_sound_sim_pair_and_records_the_link():
    spec = cluster.cluster_spec("sim_pair", sim_members())
    result = cluster.check(spec, *good_inputs(spec), issues=ISSUES)
    assert result["ok"] and result["failures"] == [] and result["nodes_alive"] == 2
    assert [n["node_id"] for n in result["nodes"]] == ["n1", "n2"] and all(n["alive"] for n in result["nodes"])
    # iperf3 on GPU-less hosts: recorded with its note, not judged against 175 Gb/s; ethtool not judged.
    assert result["link"]["method"] == "iperf3" and result["link"]["gbps"] == 20.0 and "container network" in result["link"]["note"]
    assert result["link"]["speed_mbps"] == 10000


def _mutate(spec, fn):
    status, probe, facts = good_inputs(spec)
    fn(status, probe, facts)
    return cluster.check(spec, status, probe, facts, issues=ISSUES)


def _only(result, issue_id):
    assert not result["ok"]
    assert [f["id"] for f in result["failures"]] == [issue_id], result["failures"]
    failure = result["failures"][0]
    entry = next(i for i in ISSUES["issues"] if i["id"] == issue_id)
    assert entry.get("cluster_check") is True
    assert failure["remedy"] and "{" not in failure["reason"] + failure["remedy"]
    return failure


@pytest.mark.unit
def test_check_worker_not_joined():
    spec = cluster.cluster_spec("sim_pair", sim_members())

    def gone(status, probe, facts):
        probe["nodes"].pop()
        facts["spark-sim12"]["container"] = {"exists": True, "running": False, "status": "exited", "exit_code": 1,
                                             "log_tail": "x\nConnectionError: GCS at 172.31.250.99:6379 not reachable"}
    f = _only(_mutate(spec, gone), "ray_worker_not_joined")
    assert f["host"] == "spark-sim12" and "1 of 2 nodes after 60 s" in f["reason"]
    assert "exit code 1" in f["reason"] and "GCS at 172.31.250.99" in f["reason"] and "6379" in f["remedy"]
    # A worker whose container runs but never joined: its log's last line is named.

    def stuck(status, probe, facts):
        probe["nodes"].pop()
        facts["spark-sim12"]["container"] = {"exists": True, "running": True, "status": "running",
                                             "log_tail": "Local node IP: 172.31.250.12\nWaiting for the GCS at 172.31.250.11:6379"}
    f = _only(_mutate(spec, stuck), "ray_worker_not_joined")
    assert "its container runs" in f["reason"] and "its log ends: Waiting for the GCS at 172.31.250.11:6379" in f["reason"]
    # Without a probe the count of ray status decides, and the worker is named.
    status = cluster.parse_ray_status(STATUS_2X_V)            # one node active
    assert status["format"] and status["nodes_active"] == 1 and status["answer"] is None
    res = cluster.check(spec, status, None, {}, issues=ISSUES)
    assert [x["id"] for x in res["failures"]] == ["ray_worker_not_joined"]
    assert "worker spark-sim12 (172.31.250.12) did not join" in res["failures"][0]["reason"], res["failures"][0]


@pytest.mark.unit
def test_check_head_whose_ray_does_not_answer():
    """No probe and a `ray status` that is no cluster status: the head is named with what it
    answered and its container's last log line, not an unnamed worker."""
    spec = cluster.cluster_spec("sim_pair", sim_members())
    said = "2026-12-04 INFO\nConnectionError: Could not find any running Ray instance. Please specify the one to connect to."
    status = cluster.parse_ray_status(said)
    assert status["format"] is None and status["nodes_active"] == 0 and status["answer"].startswith("ConnectionError")
    facts = {"spark-sim11": {"container": {"exists": True, "running": True, "status": "running",
                                           "log_tail": "Local node IP: 172.31.250.11\nraylet died"}}}
    res = cluster.check(spec, status, None, facts, issues=ISSUES)
    assert [(x["id"], x["host"]) for x in res["failures"]] == [("ray_head_not_running", "spark-sim11"),
                                                              ("ray_worker_not_joined", "spark-sim12")]
    assert "the head does not answer" in res["failures"][1]["reason"]
    reason = res["failures"][0]["reason"]
    assert "answered no cluster status (ConnectionError: Could not find any running Ray instance" in reason, reason
    assert "its log ends: raylet died" in reason and "docker logs sparkbench-ray-spark-sim11" in res["failures"][0]["remedy"]
    # A status that lists no active node: the head is not in its own cluster either.
    empty = STATUS_2X_V.replace(" 1 node_cd2dc58fa833bf2d7fb762a23cfc3fdc1c1854482d9d91a258df3180", " (no active nodes)")
    status = cluster.parse_ray_status(empty)
    assert status["format"] and status["nodes_active"] == 0
    res = cluster.check(spec, status, None, facts, issues=ISSUES)
    assert [x["id"] for x in res["failures"]] == ["ray_head_not_running", "ray_worker_not_joined"]
    assert "lists no active node, not even the head's" in res["failures"][0]["reason"], res["failures"][0]


@pytest.mark.unit
def test_check_head_not_running():
    spec = cluster.cluster_spec("sim_pair", sim_members())

    def no_head(status, probe, facts):
        probe["nodes"] = []
        facts["spark-sim11"]["container"] = {"exists": True, "running": False, "status": "exited", "exit_code": 127}
    ids = [f["id"] for f in _mutate(spec, no_head)["failures"]]
    assert ids == ["ray_head_not_running", "ray_worker_not_joined"]


@pytest.mark.unit
def test_check_host_ip_mismatch():
    spec = cluster.cluster_spec("sim_pair", sim_members())

    def other_ip(status, probe, facts):
        probe["nodes"][1].update(address="10.0.0.12", hostname="elsewhere")
    f = _only(_mutate(spec, other_ip), "ray_host_ip_mismatch")
    assert "VLLM_HOST_IP is 172.31.250.12" in f["reason"] and "registered the node as 10.0.0.12" in f["reason"]

    def by_hostname(status, probe, facts):
        probe["nodes"][1].update(address="10.0.0.12")
    assert _only(_mutate(spec, by_hostname), "ray_host_ip_mismatch")["host"] == "spark-sim12"


@pytest.mark.unit
def test_check_gpu_count():
    spec = cluster.cluster_spec("sim_pair", sim_members())
    f = _only(_mutate(spec, lambda s, p, f: p["nodes"][1].update(gpus=0.0)), "ray_gpu_count")
    assert f["host"] == "spark-sim12" and "0.0 GPU" in f["reason"]


@pytest.mark.unit
@pytest.mark.parametrize("issue_id, fn, text", [
    ("pair_image_mismatch", lambda s, p, f: f["spark-sim12"].update(image_id="sha256:2"), "sha256:2"),
    ("pair_driver_mismatch", lambda s, p, f: f["spark-sim12"].update(driver="580.82.07"), "580.82.07"),
    ("pair_mtu_mismatch", lambda s, p, f: f["spark-sim12"]["interface"].update(mtu=9000), "9000"),
    ("pair_interface_down", lambda s, p, f: f["spark-sim12"]["interface"].update(up=False), "down"),
    ("pair_interface_down", lambda s, p, f: f["spark-sim12"]["interface"].update(ipv4=None), "without an IPv4"),
    ("ray_same_subnet", lambda s, p, f: f["spark-sim12"].update(other_ipv4=["eth1 172.31.250.99/24"]), "eth1"),
    ("pair_revision_mismatch", lambda s, p, f: (f["spark-sim11"].update(model_revisions={"m/x": "abc"}),
                                                f["spark-sim12"].update(model_revisions={"m/x": None})), "missing"),
])
def test_check_pair_preflight(issue_id, fn, text):
    spec = cluster.cluster_spec("sim_pair", sim_members())
    assert text in _only(_mutate(spec, fn), issue_id)["reason"]


@pytest.mark.unit
def test_check_link_speed_and_bandwidth_judged_on_real_pairs_only():
    spec = cluster.with_addresses(cluster.cluster_spec("pair", real_members()), {})
    status, probe, facts = good_inputs(cluster.cluster_spec("sim_pair", sim_members()))
    probe["nodes"][0].update(address="192.168.100.10", hostname="spark01")
    probe["nodes"][1].update(address="192.168.100.11", hostname="spark02")
    facts = {"spark01": {**facts["spark-sim11"], "link_speed_mbps": 200000},
             "spark02": {**facts["spark-sim12"], "link_speed_mbps": 100000}}
    facts["spark01"]["interface"] = {"name": "enp1s0f1np1", "up": True, "ipv4": "192.168.100.10", "prefixlen": 24, "mtu": 1500}
    facts["spark02"]["interface"] = {"name": "enp1s0f1np1", "up": True, "ipv4": "192.168.100.11", "prefixlen": 24, "mtu": 1500}
    facts["spark01"]["bandwidth"] = cluster.parse_ib_write_bw(IB_WRITE_BW)
    result = cluster.check(spec, status, probe, facts, issues=ISSUES)
    assert [f["id"] for f in result["failures"]] == ["pair_link_speed", "pair_link_bandwidth"]
    assert "100000 Mb/s on enp1s0f1np1 of spark02" in result["failures"][0]["reason"]
    assert "92.55 Gb/s" in result["failures"][1]["reason"] and result["link"]["threshold_gbps"] == 175.0
    # A sound real pair: 200000Mb/s and 189.85 Gb/s.
    facts["spark02"]["link_speed_mbps"] = 200000
    facts["spark01"]["bandwidth"] = {"method": "ib_write_bw", "gbps": 189.85, "note": "two HCAs"}
    assert cluster.check(spec, status, probe, facts, issues=ISSUES)["ok"]
    # The same slow iperf3 figure is only recorded.
    facts["spark01"]["bandwidth"] = {"method": "iperf3", "gbps": 30.0, "note": "perftest not installed"}
    assert cluster.check(spec, status, probe, facts, issues=ISSUES)["ok"]


IB_WRITE_BW = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rocep1s0f0
 Link type       : Ethernet
 GID index       : 3
 Mtu             : 1024[B]
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      530000           0.00               92.55 		     0.176533
---------------------------------------------------------------------------------------
"""


@pytest.mark.unit
def test_link_parsers():
    assert cluster.parse_ib_write_bw(IB_WRITE_BW)["gbps"] == 92.55
    doc = {"end": {"sum_received": {"bits_per_second": 12.5e9}}}
    assert cluster.parse_iperf3(json.dumps(doc), "n") == {"method": "iperf3", "gbps": 12.5, "note": "n"}
    assert cluster.parse_iperf3('{"error": "unable to connect to server"}', "n")["gbps"] is None
    facts = cluster.parse_node_probe("hostname=h\noperstate=up\nmtu=9000\naddr=lo 127.0.0.1/8\n"
                                     "addr=enp1s0f1np1 192.168.100.10/24\naddr=enP2p1s0f1np1 192.168.101.10/24\n"
                                     "ethtool=yes\nspeed=200000Mb/s\ndriver=580.95.05\nib_write_bw=yes\niperf3=no\n",
                                     "enp1s0f1np1")
    assert facts["interface"] == {"name": "enp1s0f1np1", "up": True, "operstate": "up", "ipv4": "192.168.100.10",
                                  "prefixlen": 24, "mtu": 9000}
    assert facts["other_ipv4"] == ["enP2p1s0f1np1 192.168.101.10/24"] and facts["link_speed_mbps"] == 200000
    assert facts["driver"] == "580.95.05" and facts["tools"] == {"ib_write_bw": True, "iperf3": False, "ethtool": True}


@pytest.mark.unit
def test_failure_message_names_id_host_and_remedy():
    spec = cluster.cluster_spec("sim_pair", sim_members())
    result = _mutate(spec, lambda s, p, f: p["nodes"].pop())
    msg = cluster.failure_message(result)
    assert msg.startswith("ray_worker_not_joined (spark-sim12): ") and "Fix: check that the worker reaches" in msg


# ---- the result block ---------------------------------------------------------------------------

@pytest.mark.unit
def test_cluster_block_shape():
    spec = cluster.cluster_spec("sim_pair", sim_members())
    status, probe, facts = good_inputs(spec)
    checked = cluster.check(spec, status, probe, facts, issues=ISSUES)
    serving_probe = copy.deepcopy(probe)
    serving_probe["placement_groups"] = [
        {"id": "old", "state": "REMOVED", "bundles": [{"GPU": 1.0}] * 2},
        {"id": "pg1", "state": "CREATED", "bundles": [{"GPU": 1.0}, {"GPU": 1.0}], "bundles_to_node_id": {"0": "n1", "1": "n2"}}]
    serving_probe["actors"] = [{"class": "RayWorkerWrapper", "node_id": "n1", "state": "ALIVE"},
                               {"class": "RayWorkerWrapper", "node_id": "n2", "state": "ALIVE"},
                               {"class": "RayWorkerWrapper", "node_id": "n2", "state": "DEAD"},
                               {"class": "_Other", "node_id": "n1", "state": "ALIVE"}]
    serving = {"gpus_used": 2.0, "gpus_total": 2.0}
    block = cluster.cluster_block(spec, checked, serving_probe, serving, tensor_parallel_size=2, pipeline_parallel_size=1)
    assert set(block) == {"name", "head", "members", "backend", "ray_version", "tensor_parallel_size",
                          "pipeline_parallel_size", "nodes", "nodes_alive", "gpus_in_use", "gpus_total",
                          "placement_group_id", "worker_actor_node_ids", "link"}
    assert (block["name"], block["head"], block["members"]) == ("sim_pair", "spark-sim11", ["spark-sim11", "spark-sim12"])
    assert block["backend"] == "ray" and block["ray_version"] == "2.60.0"
    assert (block["tensor_parallel_size"], block["pipeline_parallel_size"], block["nodes_alive"]) == (2, 1, 2)
    assert (block["gpus_in_use"], block["gpus_total"], block["placement_group_id"]) == (2.0, 2.0, "pg1")
    assert block["worker_actor_node_ids"] == ["n1", "n2"]
    assert set(block["nodes"][0]) == {"host", "role", "address", "node_id", "image", "image_id", "driver", "alive",
                                      "gpus", "interface", "mtu", "link_speed_mbps"}
    assert block["nodes"][1]["node_id"] == "n2" and block["nodes"][1]["driver"] == "580.95.05"
    assert set(block["link"]) == {"method", "gbps", "threshold_gbps", "speed_mbps", "note"}


# ---- known issues (log signatures) ------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("log, issue", [
    # vLLM's texts (vllm/executor/ray_utils.py): the warning, the wait with backoff, the error at the timeout.
    ("WARNING 02-02 19:54:20 ray_utils.py:315] The number of required GPUs exceeds the total number of available "
     "GPUs in the placement group.", "ray_worker_not_joined"),
    ("INFO 02-02 19:54:30 ray_utils.py:212] Waiting for creating a placement group of specs for 10 seconds. "
     "specs=[{'GPU': 1.0, 'node:172.31.42.4': 0.001}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if "
     "you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP "
     "environment variable specified in each node if you are running on a multi-node.", "ray_worker_not_joined"),
    ("ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}] within 1800 "
     "seconds. See `ray status` and `ray list nodes` to make sure the cluster has enough resources.",
     "ray_worker_not_joined"),
    # Ray's texts (ray/exceptions.py 2.60), then vLLM's EngineDeadError: the Ray cause wins.
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
     "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", "ray_worker_lost"),
    ("ERROR ... RayActorError: The actor died unexpectedly before finishing this task.", "ray_worker_lost"),
    ("The actor is dead because its node has died. Node Id: 4bfcf9", "ray_worker_lost"),
    # NCCL_DEBUG=INFO when no IB device initialises.
    ("spark01:123:456 [0] NCCL INFO NET/Socket : Using [0]enp1s0f1np1:192.168.100.10<0>", "nccl_socket_fallback"),
    ("spark01:123:456 [0] NCCL INFO Using network Socket", "nccl_socket_fallback"),
])
def test_ray_log_signatures(log, issue):
    match = vp.vllm_log_match(log, ISSUES)
    assert match and match["id"] == issue, match
    assert "{match." not in match["reason"] + match["remedy"]


@pytest.mark.unit
def test_nccl_ib_lines_are_not_a_fallback():
    assert vp.vllm_log_match("NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.100.10<0>\n"
                             "NCCL INFO Using network IB", ISSUES) is None


@pytest.mark.unit
def test_every_check_failure_id_is_a_known_issue():
    ids = {i["id"] for i in ISSUES["issues"] if i.get("cluster_check")}
    assert {"ray_worker_not_joined", "ray_host_ip_mismatch", "ray_gpu_count", "pair_image_mismatch",
            "pair_revision_mismatch", "pair_driver_mismatch", "pair_interface_down", "pair_mtu_mismatch",
            "pair_link_speed", "pair_link_bandwidth", "ray_same_subnet", "ray_enp2p_twin",
            "ray_head_not_running"} <= ids


# ---- the filter adapters (roles/ray_cluster) ----------------------------------------------------

def _filters():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ray_cluster_filters", REPO / "filter_plugins/ray_cluster_filters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.sim
def test_filter_adapters():
    f = _filters()
    assert set(f.FilterModule().filters()) >= {"ray_cluster_spec", "ray_cluster_check", "ray_status_parse",
                                                "ray_cluster_block", "ray_cluster_node_facts"}
    groups = {"pair": ["spark01", "spark02"]}
    hostvars = {"spark01": {"ray_cluster_interface": "enp1s0f1np1", "unrelated": 1},
                "spark02": {"ray_cluster_interface": "enp1s0f1np1"}}
    spec = f.ray_cluster_spec("pair", groups, hostvars)
    assert spec["members"] == ["spark01", "spark02"] and not spec["resolved"]
    # resolve.yml: `ip -4 -o addr show dev IF` looped over the nodes without an address.
    results = [{"item": spec["nodes"][0], "stdout": "5: enp1s0f1np1    inet 192.168.100.10/24 brd 192.168.100.255 scope global"},
               {"item": spec["nodes"][1], "stdout": ""}]
    assert f.ray_cluster_addresses(results) == {"spark01": "192.168.100.10"}
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="spark02 has no IPv4"):
        f.ray_cluster_with_addresses(spec, f.ray_cluster_addresses(results))
    with pytest.raises(AnsibleFilterError, match="ray_cluster_spec: bench_cluster is empty"):
        f.ray_cluster_spec("", groups, hostvars)
    assert f.ray_probe_parse('warning\nRAY_PROBE_JSON {"nodes": []}\n') == {"nodes": []}
    # check_nodes.yml passes the exec task's whole result: stdout parsed, stderr the answer when it is no status.
    assert f.ray_status_parse({"stdout": STATUS_2X_V, "stderr": "WARNING x"}) == cluster.parse_ray_status(STATUS_2X_V)
    gone = f.ray_status_parse({"stdout": "", "stderr": "ConnectionError: no Ray\n", "rc": 1})
    assert gone["format"] is None and gone["answer"] == "ConnectionError: no Ray"
    assert f.ray_status_parse({"msg": "Timeout waiting for exec"})["answer"] == "Timeout waiting for exec"
    assert f.ray_probe_parse("Traceback ...") is None
    # check_nodes.yml's registered results → node facts.
    sim = cluster.cluster_spec("sim_pair", sim_members())
    n1, n2 = sim["nodes"]
    facts = f.ray_cluster_node_facts(
        sim,
        [{"item": n1, "exists": True, "container": {"Image": "sha256:1", "State": {"Running": True, "Status": "running"}}},
         {"item": n2, "exists": True, "container": {"Image": "sha256:1", "State": {"Running": False, "Status": "exited",
                                                                                  "ExitCode": 1}}}],
        [{"item": n1, "images": [{"Id": "sha256:1", "RepoDigests": ["x@sha256:d"]}]}, {"item": n2, "images": []}],
        [{"item": n1, "stdout": "operstate=up\nmtu=1500\naddr=eth0 172.31.250.11/24\nspeed=10000Mb/s\n"},
         {"item": n2, "stdout": ""}],
        # check_nodes.yml's log task loops over the container inspection's results.
        [{"item": {"item": n1, "exists": True}, "skipped": True},
         {"item": {"item": n2, "exists": True}, "stdout": "", "stderr": "ConnectionError: no GCS"}],
        [{"item": [n1, {"model": "m/x", "revision": "abc"}], "stat": {"exists": True}},
         {"item": [n2, {"model": "m/x", "revision": "abc"}], "stat": {"exists": False}}],
        {"method": "iperf3", "gbps": 9.9, "note": "n"})
    assert facts["spark-sim11"]["image_digest"] == "sha256:d" and facts["spark-sim11"]["interface"]["mtu"] == 1500
    assert facts["spark-sim11"]["bandwidth"]["gbps"] == 9.9 and facts["spark-sim11"]["model_revisions"] == {"m/x": "abc"}
    assert facts["spark-sim12"]["container"]["log_tail"] == "ConnectionError: no GCS"
    assert facts["spark-sim12"]["model_revisions"] == {"m/x": None} and "interface" not in facts["spark-sim12"]


@pytest.mark.unit
def test_restart_plan_starts_a_cluster_that_lost_a_node_again_as_a_whole():
    """Some nodes up and others down: every node goes, the cluster starts afresh (a worker started
    alone leaves its old entry alive in Ray: one node and one GPU too many). All up: left alone;
    none up: a plain start, nothing to remove."""
    sim = cluster.cluster_spec("sim_pair", sim_members())
    head, worker = sim["nodes"]
    up = {head["container"]: True, worker["container"]: True}
    assert cluster.restart_plan(sim["nodes"], up) == {"restart": False, "running": [head["host"], worker["host"]],
                                                      "down": [], "reason": None}
    assert cluster.restart_plan(sim["nodes"], {})["restart"] is False
    lost = cluster.restart_plan(sim["nodes"], {head["container"]: True, worker["container"]: False})
    assert lost["restart"] and lost["down"] == [worker["host"]] and lost["running"] == [head["host"]]
    assert worker["host"] in lost["reason"] and "starts again as a whole" in lost["reason"]
    # a dead head under a running worker: the worker would not join a new head either
    assert cluster.restart_plan(sim["nodes"], {worker["container"]: True})["down"] == [head["host"]]
    # the filter reads start.yml's looped docker_container_info results (a removed container: exists false)
    f = _filters()
    results = [{"item": head, "exists": True, "container": {"State": {"Running": True}}},
               {"item": worker, "exists": False, "container": None}]
    assert f.ray_cluster_restart_plan(sim, results) == lost
    results[1] = {"item": worker, "exists": True, "container": {"State": {"Running": False, "Status": "exited"}}}
    assert f.ray_cluster_restart_plan(sim, results) == lost
    results[1] = {"item": worker, "exists": True, "container": {"State": {"Running": True}}}
    assert f.ray_cluster_restart_plan(sim, results)["restart"] is False
