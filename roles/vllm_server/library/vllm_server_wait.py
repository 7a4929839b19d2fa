#!/usr/bin/python
"""Ansible module: wait until a vLLM container answers GET /health, watching the container."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_server_wait
short_description: Wait until a vLLM server container is ready
description:
  - Polls the server's /health URL from the host until it answers 200, while checking the container
    state, so a server that exits during start fails at once instead of after the timeout.
  - Reports the time to ready (from the container's StartedAt to the first 200) and the model
    memory from vLLM's "Model loading took X GiB" log line.
  - When ready, returns the start of the container log (the startup log, at most startup_log_lines
    lines of stdout, then of stderr, each cut at 2000 characters) for sparkbench.engine_log, which
    reads the kernels vLLM chose off it on the controller.
  - On failure (container exited, timeout) returns the last log lines, the exit code and Docker's
    start error, for matching against known error signatures.
  - Every value in secrets is masked (Ansible's no_log masking) in everything returned.
  - Read-only; never reports changed. Needs the docker CLI on the host.
options:
  container: {description: Container name., type: str, required: true}
  exec_log:
    description:
      - A cluster variant's server runs inside the (Ray head) container, started with docker exec: the
        path of its log file there (its pid in <exec_log>.pid). The server's exit, its start time and its
        log are then read from these files instead of the container's state and log.
    type: str
  url: {description: Health URL polled from the host., type: str, required: true}
  timeout: {description: Seconds to wait for readiness., type: float, default: 900}
  interval: {description: Seconds between polls., type: float, default: 0.25}
  log_lines: {description: Log lines returned on failure., type: int, default: 40}
  startup_log_lines: {description: Lines of the startup log returned when ready (0 returns none)., type: int, default: 400}
  secrets: {description: Secret values (HF token, API key) masked in what is returned; never logged., type: list, elements: str, default: []}
"""

RETURN = r"""
time_to_ready_s: {description: Seconds from container start to the first 200 from /health., type: float}
model_memory_gib: {description: GiB from "Model loading took X GiB", null when the log has none., type: float}
state: {description: ready / exited / timeout., type: str}
startup_log: {description: "The first startup_log_lines lines of the container log when ready (stdout, then stderr), secrets masked; empty on failure.", type: str}
exit_code: {description: Container exit code when it exited., type: int}
log_excerpt: {description: Last log lines (failure only)., type: str}
start_error: {description: Docker's State.Error (failure only)., type: str}
"""

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

from ansible.module_utils.basic import AnsibleModule

MEMORY_RE = re.compile(r"Model loading took ([0-9.]+) ?GiB")


def _inspect(name: str) -> dict | None:
    proc = subprocess.run(["docker", "inspect", "--type", "container", name], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def _logs(name: str, tail: str) -> str:
    proc = subprocess.run(["docker", "logs", "--tail", tail, name], capture_output=True, text=True, check=False)
    return (proc.stdout or "") + (proc.stderr or "")


def _exec(name: str, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", name, "sh", "-c", script, *args], capture_output=True, text=True,
                          check=False)


def _exec_alive(name: str, log: str) -> bool:
    """The exec'd server (pid in ``<log>.pid``) is still running in the container."""
    return _exec(name, 'kill -0 "$(cat "$0.pid")" 2>/dev/null', log).returncode == 0


def _exec_started(name: str, log: str) -> float | None:
    """When the exec'd server started: the modification time of its pid file (epoch seconds)."""
    proc = _exec(name, 'date -r "$0.pid" +%s.%N', log)
    try:
        return float(proc.stdout.strip())
    except ValueError:
        return None


def _exec_log(name: str, log: str, tail: str | None = None) -> str:
    proc = _exec(name, 'tail -n "$1" "$0"' if tail else 'cat "$0"', log, *([tail] if tail else []))
    return proc.stdout or ""


def _parse_started(text: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds → epoch seconds."""
    found = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", text or "")
    if not found or text.startswith("0001-"):
        return None
    base = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return base + (float("0" + found.group(2)[:10]) if found.group(2) else 0.0)


def startup_excerpt(stdout: str, stderr: str, lines: int, width: int = 2000) -> str:
    """The first ``lines`` lines of stdout, then of stderr (the log up to ready), each cut at ``width``."""
    out = (stdout or "").splitlines()[:max(lines, 0)]
    out += (stderr or "").splitlines()[:max(lines - len(out), 0)]
    return "\n".join(line[:width] for line in out)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "exec_log": {"type": "str", "default": None},
            "url": {"type": "str", "required": True},
            "timeout": {"type": "float", "default": 900.0},
            "interval": {"type": "float", "default": 0.25},
            "log_lines": {"type": "int", "default": 40},
            "startup_log_lines": {"type": "int", "default": 400},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
        },
        supports_check_mode=True,
    )
    name, url = module.params["container"], module.params["url"]
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no server is started, nothing to wait for")
    deadline = time.monotonic() + module.params["timeout"]
    next_inspect = 0.0
    info = _inspect(name)
    if info is None:
        module.fail_json(msg=f"container {name} does not exist; launch it first", state="missing")
    exec_log = module.params["exec_log"]
    started = (_exec_started(name, exec_log) if exec_log
               else _parse_started(info.get("State", {}).get("StartedAt", "")))
    state = "timeout"
    while True:
        if _healthy(url):
            state = "ready"
            break
        now = time.monotonic()
        if now >= next_inspect:
            info = _inspect(name) or {}
            status = info.get("State", {}).get("Status")
            if status in ("exited", "dead", "removing") or not info:
                state = "exited"
                break
            if exec_log and not _exec_alive(name, exec_log):
                state = "exited"
                break
            next_inspect = now + 1.0
        if now >= deadline:
            break
        time.sleep(module.params["interval"])

    ready_at = time.time()
    if state == "ready" and exec_log:
        text = _exec_log(name, exec_log)
        found = MEMORY_RE.search(text)
        module.exit_json(
            changed=False, state="ready",
            time_to_ready_s=round(ready_at - started, 3) if started else None,
            model_memory_gib=float(found.group(1)) if found else None,
            startup_log=startup_excerpt(text, "", module.params["startup_log_lines"]),
        )
    if exec_log:
        tail = _exec_log(name, exec_log, str(module.params["log_lines"]))
        reason = (f"the server in container {name} exited before {url} answered" if state == "exited"
                  else f"{url} did not answer 200 within {module.params['timeout']:.0f} s")
        module.fail_json(msg=reason, state=state, exit_code=None, start_error="", log_excerpt=tail)
    if state == "ready":
        proc = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
        log = (proc.stdout or "") + (proc.stderr or "")
        found = MEMORY_RE.search(log)
        module.exit_json(
            changed=False, state="ready",
            time_to_ready_s=round(ready_at - started, 3) if started else None,
            model_memory_gib=float(found.group(1)) if found else None,
            startup_log=startup_excerpt(proc.stdout, proc.stderr, module.params["startup_log_lines"]),
        )
    info = _inspect(name) or {}
    st = info.get("State", {})
    tail = _logs(name, str(module.params["log_lines"]))
    reason = (f"container {name} exited with status {st.get('ExitCode')} before {url} answered"
              if state == "exited" else f"{url} did not answer 200 within {module.params['timeout']:.0f} s")
    module.fail_json(msg=reason, state=state, exit_code=st.get("ExitCode"), start_error=st.get("Error") or "",
                     log_excerpt=tail)


if __name__ == "__main__":
    main()
