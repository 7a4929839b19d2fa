"""The simulator held against real vLLM 0.32: the same requests to both, compared as a client sees them.

One real server (the session's ``sparkbench/vllm-cpu:latest`` serving ``sparkbench/tiny-llama`` with
``--max-model-len 2048``, tests/conftest.py ``real_vllm``, shared with the image test) and one simulator
serving a profile under the same model id and length. :func:`observe` turns one server's answers into
named checks (key sets, or values); every check whose two answers differ must be a row of the table
"Differences from real vLLM 0.32" in ``vllm_sim/README.md``, and every row must still differ
(so the list cannot go stale). Token counts and texts are not compared (different tokenizers, random
weights): shapes, statuses, error fields, finish reasons and the counts' consistency are.

Spec-decode metric families are not compared: this CPU build dies on speculative decoding.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO_ROOT, start_sim

pytestmark = pytest.mark.sim

IMAGE = "sparkbench/vllm-cpu:latest"
MODEL = "sparkbench/tiny-llama"
MAX_MODEL_LEN = 2048
README = REPO_ROOT / "vllm_sim" / "README.md"
# Families the harness and its tests read (sparkbench/measure.py, perf/fidelity.py, the real-vLLM
# end-to-end test, the achieved-bandwidth figure): they must exist in both, with the same labels.
HARNESS_FAMILIES = [
    "vllm:request_time_per_output_token_seconds", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:generation_tokens",
    "vllm:prompt_tokens", "vllm:request_success", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc", "vllm:iteration_tokens_total", "vllm:num_preemptions",
    "vllm:estimated_read_bytes_per_gpu", "vllm:prompt_tokens_cached", "vllm:request_num_preemptions",
    "vllm:request_decode_time_seconds",
]
# The simulator gets the real server's flags.
SERVE_ARGS = ["--max-model-len", str(MAX_MODEL_LEN)]
STREAM_TOKENS = 6
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


# --- servers -----------------------------------------------------------------------------------
def _image_present() -> bool:
    return subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30).returncode == 0


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


@pytest.fixture(scope="module")
def real_url(request):
    """Real vLLM 0.32: the session's container (tests/conftest.py `real_vllm`, the plain command,
    shared with the image test). ``SPARKBENCH_REAL_VLLM_URL`` names an already running one instead
    (same image), for working on this test."""
    if os.environ.get("SPARKBENCH_REAL_VLLM_URL"):
        return os.environ["SPARKBENCH_REAL_VLLM_URL"].rstrip("/")
    return request.getfixturevalue("real_vllm").base_url


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory):
    """The simulator under the real server's model id and max_model_len (no reasoning parser, as the
    tiny Llama has none); its own tiny-llama profile where one exists, else Gemma 3 4B (a plain
    chat model) served under that name."""
    have_profile = (REPO_ROOT / "sparkbench/data/profiles/models" / "sparkbench__tiny-llama.json").exists()
    model = MODEL if have_profile else "google/gemma-3-4b-it"
    sim = start_sim(tmp_path_factory.mktemp("conformance"), model=model,
                    args=["--served-model-name", MODEL, *SERVE_ARGS],
                    env={"VLLM_SIM_RATE": "400", "HF_TOKEN": "conformance-test-dummy"})
    yield sim.base_url
    sim.stop()


# --- requests ----------------------------------------------------------------------------------
def _post(url: str, body: dict, timeout: float = 120.0) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


def _chat(content: str = "Say hello.", **kw) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0, **kw}


def _events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order; anything else but blank lines is an error."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: ") and "\n" not in block, f"not one data line: {block!r}"
        out.append(block[len("data: "):])
    return out


def _keys(obj) -> frozenset:
    return frozenset(obj) if isinstance(obj, dict) else frozenset()


def _stream_checks(obs: dict, prefix: str, raw: bytes, headers: dict, include_usage: bool, continuous: bool) -> None:
    events = _events(raw)
    obs[f"{prefix}.content_type"] = headers.get("content-type")
    obs[f"{prefix}.compact_json"] = raw.startswith(b'data: {"id":"')     # pydantic's separators, no spaces
    obs[f"{prefix}.terminator"] = (events[-1] == "[DONE]", events.count("[DONE]"))
    chunks = [json.loads(e) for e in events[:-1]]
    role, rest = chunks[0], chunks[1:]
    usage_chunk = rest.pop() if include_usage else None
    obs[f"{prefix}.role_chunk"] = _keys(role)
    obs[f"{prefix}.role_chunk.choice"] = _keys(role["choices"][0])
    obs[f"{prefix}.role_chunk.delta"] = json.dumps(role["choices"][0]["delta"], sort_keys=True)
    finish = [c for c in rest if c["choices"] and c["choices"][0].get("finish_reason")]
    obs[f"{prefix}.finish_reasons"] = tuple(c["choices"][0]["finish_reason"] for c in finish)
    obs[f"{prefix}.finish_is_last_token_chunk"] = bool(finish) and finish[-1] is rest[-1]
    tokens = rest[:-1]
    obs[f"{prefix}.token_chunk"] = frozenset().union(*(_keys(c) for c in tokens))
    obs[f"{prefix}.token_chunk.choice"] = frozenset().union(*(_keys(c["choices"][0]) for c in tokens))
    obs[f"{prefix}.token_chunk.delta"] = frozenset().union(*(_keys(c["choices"][0]["delta"]) for c in tokens))
    obs[f"{prefix}.finish_chunk"] = _keys(rest[-1])
    obs[f"{prefix}.finish_chunk.choice"] = _keys(rest[-1]["choices"][0])
    obs[f"{prefix}.objects"] = frozenset(c["object"] for c in chunks)
    obs[f"{prefix}.one_id"] = len({c["id"] for c in chunks}) == 1
    if include_usage:
        obs[f"{prefix}.usage_chunk"] = _keys(usage_chunk)
        obs[f"{prefix}.usage_chunk.choices"] = json.dumps(usage_chunk["choices"])
        u = usage_chunk["usage"]
        obs[f"{prefix}.usage_chunk.usage"] = _keys(u)
        obs[f"{prefix}.usage_chunk.counts"] = (u["completion_tokens"] == STREAM_TOKENS,
                                              u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"])
    if continuous:
        usages = [c.get("usage") for c in chunks[:len(chunks) - 1]]
        obs[f"{prefix}.continuous.on_every_chunk"] = all(isinstance(u, dict) for u in usages)
        obs[f"{prefix}.continuous.usage"] = frozenset().union(*(_keys(u) for u in usages))
        counts = [u["completion_tokens"] for u in usages if isinstance(u, dict)]
        obs[f"{prefix}.continuous.counts"] = (counts[0] == 0, counts == sorted(counts), counts[-1] == STREAM_TOKENS,
                                              all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
                                                  for u in usages if isinstance(u, dict)))


def _error_check(obs: dict, name: str, status: int, raw: bytes) -> None:
    body = json.loads(raw)
    err = body.get("error") if isinstance(body, dict) else None
    obs[f"error.{name}.status"] = status
    obs[f"error.{name}.body"] = _keys(body)
    obs[f"error.{name}.error"] = _keys(err)
    if isinstance(err, dict):
        obs[f"error.{name}.fields"] = json.dumps({k: err.get(k) for k in ("type", "code", "param")}, sort_keys=True)
        obs[f"error.{name}.message"] = re.sub(r"\d+", "N", str(err.get("message")))   # counts differ by tokenizer


def observe(base: str) -> dict:
    """Everything the comparison looks at, from one server: {check name: frozenset of keys | value}."""
    obs: dict = {}
    chat = base + "/v1/chat/completions"
    status, raw, headers = _post(chat, _chat(max_tokens=STREAM_TOKENS, ignore_eos=True, stream=True,
                                             stream_options=CONTINUOUS))
    obs["stream.status"] = status
    _stream_checks(obs, "stream", raw, headers, include_usage=True, continuous=True)
    status, raw, headers = _post(chat, _chat(max_tokens=STREAM_TOKENS, ignore_eos=True, stream=True))
    _stream_checks(obs, "stream.plain", raw, headers, include_usage=False, continuous=False)

    status, raw, headers = _post(chat, _chat(max_tokens=STREAM_TOKENS, ignore_eos=True))
    body = json.loads(raw)
    obs["body.status"], obs["body.content_type"] = status, headers.get("content-type")
    obs["body"] = _keys(body)
    obs["body.object"] = body["object"]
    obs["body.choice"] = _keys(body["choices"][0])
    obs["body.message"] = _keys(body["choices"][0]["message"])
    obs["body.message.role"] = body["choices"][0]["message"]["role"]
    obs["body.finish_reason"] = body["choices"][0]["finish_reason"]
    obs["body.usage"] = _keys(body["usage"])
    u = body["usage"]
    obs["body.usage.counts"] = (u["completion_tokens"] == STREAM_TOKENS,
                                u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"])
    obs["body.system_fingerprint"] = bool(re.fullmatch(r"vllm-\d+\.\d+\.\d+-[0-9a-f]{8}",
                                                       str(body.get("system_fingerprint"))))

    # Bad requests (and one that is not: prompt + max_tokens over max_model_len stops at the limit).
    _error_check(obs, "unknown_model", *_post(chat, {**_chat(max_tokens=4), "model": "no/such-model"})[:2])
    _error_check(obs, "unknown_model_stream", *_post(chat, {**_chat(max_tokens=4, stream=True),
                                                           "model": "no/such-model"})[:2])
    _error_check(obs, "negative_max_tokens", *_post(chat, _chat(max_tokens=-1))[:2])
    _error_check(obs, "negative_max_completion_tokens", *_post(chat, _chat(max_completion_tokens=-1))[:2])
    _error_check(obs, "max_tokens_over_max_model_len", *_post(chat, _chat(max_tokens=2 * MAX_MODEL_LEN))[:2])
    _error_check(obs, "prompt_over_max_model_len", *_post(chat, _chat(" ".join(["hello"] * 2100), max_tokens=4))[:2])
    _error_check(obs, "stream_options_without_stream", *_post(chat, _chat(max_tokens=4,
                                                                         stream_options={"include_usage": True}))[:2])
    # "the" is one token for both tokenizers: about 1910 prompt tokens + 300 > 2048.
    status, raw, _h = _post(chat, _chat(" ".join(["the"] * 1900), max_tokens=300, ignore_eos=True))
    body = json.loads(raw)
    obs["prompt_plus_max_tokens_over_len.status"] = status
    obs["prompt_plus_max_tokens_over_len.stops_at_limit"] = (
        status == 200 and body["usage"]["total_tokens"] == MAX_MODEL_LEN
        and body["choices"][0]["finish_reason"] == "length")

    status, raw, headers = _get(base + "/v1/models")
    models = json.loads(raw)
    obs["models.status"], obs["models.content_type"] = status, headers.get("content-type")
    obs["models"] = _keys(models)
    obs["models.data"] = _keys(models["data"][0])
    obs["models.permission"] = _keys(models["data"][0]["permission"][0])
    obs["models.values"] = json.dumps({k: models["data"][0][k] for k in ("id", "object", "owned_by", "max_model_len")},
                                      sort_keys=True)
    status, raw, _h = _get(base + "/version")
    obs["version"] = _keys(json.loads(raw))
    status, raw, _h = _get(base + "/health")
    obs["health"] = (status, raw)

    status, raw, headers = _get(base + "/metrics")
    obs["metrics.status"], obs["metrics.content_type"] = status, headers.get("content-type")
    fams = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    obs["metrics.families"] = frozenset(fams)
    obs["metrics.types"] = json.dumps({n: f.type for n, f in sorted(fams.items()) if n.startswith("vllm:")})
    for name in HARNESS_FAMILIES:
        f = fams.get(name)
        obs[f"metrics.labels.{name}"] = frozenset().union(*(s.labels for s in f.samples)) if f else None
    obs["_fams"] = fams
    return obs


# --- the table of listed differences --------------------------------------------------------------
def listed_differences() -> list[dict]:
    """Rows of the README table "Differences from real vLLM 0.32"."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Differences from real vLLM 0.32", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("check", "") or set(cells[0]) <= set("-"):
            continue
        check, item, sim, real, reason = cells
        rows.append({"check": check.strip("`"), "item": item.strip("`"), "sim": sim, "real": real, "reason": reason})
    return rows


def _differences(sim: dict, real: dict) -> tuple[dict, list[str]]:
    """({(check, item): ("present"/"absent" in the simulator)}, [value checks that differ])."""
    keyed, values = {}, []
    for check in sorted(set(sim) | set(real)):
        if check.startswith("_"):
            continue
        a, b = sim.get(check), real.get(check)
        if isinstance(a, frozenset) and isinstance(b, frozenset):
            for item in a - b:
                keyed[(check, item)] = "present"
            for item in b - a:
                keyed[(check, item)] = "absent"
        elif a != b:
            values.append(f"{check}: simulator {a!r} vs vLLM 0.32 {b!r}")
    return keyed, values


@pytest.fixture(scope="module")
def observed(sim_url, real_url):
    return observe(sim_url), observe(real_url)


# --- tests -------------------------------------------------------------------------------------
def test_real_server_is_vllm_032(real_url):
    assert json.loads(_get(real_url + "/version")[1]) == {"version": "0.32.0"}


def test_harness_metric_families_exist_in_both(observed):
    sim, real = observed
    for name in HARNESS_FAMILIES:
        assert name in real["_fams"], f"real vLLM 0.32 has no {name}"
        assert name in sim["_fams"], f"the simulator has no {name}"
        assert sim["_fams"][name].type == real["_fams"][name].type, name


def test_every_difference_is_listed_and_every_listed_one_still_occurs(observed):
    sim, real = observed
    keyed, values = _differences(sim, real)
    rows = listed_differences()
    assert rows, "no rows parsed from the README's table"
    for row in rows:
        assert row["sim"] in ("present", "absent") and row["real"] in ("present", "absent") and row["sim"] != row["real"], row
        assert row["reason"] and "not implemented" not in row["reason"].lower(), row
    covered = set()
    stale = []
    for row in rows:
        hits = {k for k, where in keyed.items()
                if k[0] == row["check"] and fnmatch.fnmatchcase(k[1], row["item"]) and where == row["sim"]}
        if not hits:
            stale.append(f"{row['check']} {row['item']} ({row['sim']} in the simulator)")
        covered |= hits
    unlisted = [f"{c}: `{i}` {where} in the simulator, {'absent' if where == 'present' else 'present'} in vLLM 0.32"
                for (c, i), where in sorted(keyed.items()) if (c, i) not in covered]
    problems = (["listed in vllm_sim/README.md but no longer different (remove the row):"] + stale if stale else [])
    if unlisted or values:
        problems += ["differences neither fixed in the simulator nor listed in vllm_sim/README.md:"]
        problems += unlisted + values
    assert not problems, "\n".join(problems)


def test_client_visible_behaviour(observed):
    """The checks that must hold on both servers (so a match is not two servers equally broken)."""
    for obs in observed:
        assert obs["stream.status"] == 200 and obs["body.status"] == 200
        assert obs["stream.terminator"] == (True, 1) and obs["stream.plain.terminator"] == (True, 1)
        assert obs["stream.role_chunk.delta"] == '{"content": "", "role": "assistant"}'
        assert obs["stream.finish_reasons"] == ("length",) and obs["stream.finish_is_last_token_chunk"]
        assert obs["stream.continuous.on_every_chunk"] and all(obs["stream.continuous.counts"])
        assert all(obs["stream.usage_chunk.counts"]) and obs["stream.usage_chunk.choices"] == "[]"
        assert obs["body.finish_reason"] == "length" and all(obs["body.usage.counts"])
        assert obs["body.system_fingerprint"]
        assert "system_fingerprint" in obs["stream.usage_chunk"] and "system_fingerprint" in obs["stream.plain.finish_chunk"]
        assert obs["error.unknown_model.status"] == 404 and obs["error.negative_max_tokens.status"] == 400
        assert obs["error.max_tokens_over_max_model_len.status"] == 400
        assert obs["error.prompt_over_max_model_len.status"] == 400
        assert obs["error.unknown_model.error"] == {"message", "type", "param", "code"}
        assert obs["prompt_plus_max_tokens_over_len.stops_at_limit"]
        assert obs["metrics.status"] == 200 and obs["health"] == (200, b"")
