"""Probe a running Ray cluster from inside its head container (run with the container's Python,
the one that has ``ray``): nodes, placement groups, actors as one JSON line on stdout.

    docker exec -i sparkbench-ray-<head> python3 - < ray_probe.py

Prints ``RAY_PROBE_JSON {...}``:
``{ray_version, nodes: [{node_id, address, hostname, alive, gpus, cpus}], placement_groups: [{id,
state, strategy, bundles: [{...}], bundles_to_node_id: {index: node_id}}], actors: [{id, class,
name, node_id, state, pid}], actors_source, errors: [...]}``.

Nodes come from ``ray.nodes()`` (GCS; vLLM's multi-node-serving.sh counts ``sum(node["Alive"])``),
placement groups from ``ray.util.placement_group_table()``. Actors: the public state API
(``ray.util.state.list_actors``) needs the dashboard's API server, which the nodes run without
(``--include-dashboard=false``; Ray 2.60: "Failed to connect to API server"), so the GCS actor
table (``ray._private.state.actors()``, private, Ray 2.x) is the fallback; ``actors_source`` says
which one answered. Nothing here changes the cluster (a driver connects and disconnects).
"""
import json
import sys

out = {"ray_version": None, "nodes": [], "placement_groups": [], "actors": [], "actors_source": None, "errors": []}
try:
    import ray

    out["ray_version"] = ray.__version__
    ray.init(address="auto", logging_level="ERROR", log_to_driver=False, configure_logging=False)
except Exception as exc:  # noqa: BLE001 - reported, not raised: the check says what failed
    out["errors"].append(f"ray.init: {type(exc).__name__}: {exc}")
    print("RAY_PROBE_JSON " + json.dumps(out))
    sys.exit(0)

try:
    for n in ray.nodes():
        res = n.get("Resources") or {}
        out["nodes"].append({"node_id": n.get("NodeID"), "address": n.get("NodeManagerAddress"),
                             "hostname": n.get("NodeManagerHostname"), "alive": bool(n.get("Alive")),
                             "gpus": res.get("GPU", 0.0), "cpus": res.get("CPU", 0.0)})
except Exception as exc:  # noqa: BLE001
    out["errors"].append(f"ray.nodes: {type(exc).__name__}: {exc}")

try:
    for pg_id, pg in (ray.util.placement_group_table() or {}).items():
        bundles = pg.get("bundles") or {}
        out["placement_groups"].append({
            "id": pg.get("placement_group_id") or pg_id, "name": pg.get("name") or "", "state": pg.get("state"),
            "strategy": pg.get("strategy"),
            "bundles": [bundles[k] for k in sorted(bundles, key=lambda x: int(x))],
            "bundles_to_node_id": {str(k): v for k, v in (pg.get("bundles_to_node_id") or {}).items()}})
except Exception as exc:  # noqa: BLE001
    out["errors"].append(f"placement_group_table: {type(exc).__name__}: {exc}")

try:
    from ray.util.state import list_actors

    actors = list_actors(timeout=3, raise_on_missing_output=False)
    out["actors"] = [{"id": a.actor_id, "class": a.class_name, "name": a.name or "", "node_id": a.node_id,
                      "state": a.state, "pid": a.pid} for a in actors]
    out["actors_source"] = "ray.util.state.list_actors"
except Exception as exc:  # noqa: BLE001 - no dashboard: the GCS table
    out["errors"].append(f"list_actors (public, needs the dashboard): {type(exc).__name__}")
    try:
        import ray._private.state as private_state

        table = private_state.actors() or {}
        out["actors"] = [{"id": a.get("ActorID"), "class": a.get("ActorClassName"), "name": a.get("Name") or "",
                          "node_id": (a.get("Address") or {}).get("NodeID"), "state": a.get("State"),
                          "pid": a.get("Pid")} for a in table.values()]
        out["actors_source"] = "ray._private.state.actors"
    except Exception as exc2:  # noqa: BLE001
        out["errors"].append(f"ray._private.state.actors: {type(exc2).__name__}: {exc2}")

try:
    ray.shutdown()
except Exception:  # noqa: BLE001
    pass
print("RAY_PROBE_JSON " + json.dumps(out, default=str))
