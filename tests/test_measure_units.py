"""scripts/measure.py, piece by piece: Prometheus and nvidia-smi parsing, SSE decoding, statistics,
quality checks, the code sandbox and the PNG. No server here (tests/test_measure_sim.py has those).

Oracles: prometheus_client's parser, numpy.percentile, Pillow (PNG decoding).
"""
from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from sparkbench import measure as M
from sparkbench.measure import client as measure_client

from helpers import REPO

FIX = REPO / "tests" / "fixtures" / "measure"
QUALITY = json.loads((REPO / "sparkbench/data/prompts/quality.json").read_text(encoding="utf-8"))




def _norm(v: float) -> str:
    return "nan" if math.isnan(v) else repr(float(v))


def prom_oracle(text: str) -> list[tuple[str, tuple, str]]:
    """Samples as prometheus_client parses them: (name, sorted labels, value)."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, tuple(sorted(s.labels.items())), _norm(s.value)))
    return sorted(out)


def prom_ours(text: str) -> list[tuple[str, tuple, str]]:
    return sorted((n, tuple(sorted(lab.items())), _norm(v)) for n, lab, v in M.parse_prometheus(text))


# ---- Prometheus ------------------------------------------------------------------------------


@pytest.mark.unit
def test_prometheus_parser_agrees_with_prometheus_client_on_vllm_fixture() -> None:
    text = (FIX / "vllm_metrics.txt").read_text(encoding="utf-8")
    ours = prom_ours(text)
    assert ours == prom_oracle(text)
    names = {n for n, _, _ in ours}
    # the tricky lines really are in the fixture, so agreement means something
    assert "vllm:prompt_tokens_created" in names and "process_max_fds" in names
    note = [dict(lab)["note"] for n, lab, _ in ours if n == "vllm:cache_config_info"][0]
    assert note == 'a "quoted" value, a back\\slash and a\nnewline'


@pytest.mark.unit
def test_spec_counters_sum_engines_and_positions_in_any_label_order() -> None:
    c = M.spec_counters(M.parse_prometheus((FIX / "vllm_metrics.txt").read_text(encoding="utf-8")))
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted) == (1200.0, 3600.0, 2496.0)
    assert c.per_pos == {0: 1032.0, 1: 804.0, 2: 660.0}


@pytest.mark.unit
def test_spec_delta_formulas() -> None:
    before = M.SpecCounters(100.0, 300.0, 150.0, {0: 80.0, 1: 50.0, 2: 20.0})
    after = M.SpecCounters(1100.0, 3300.0, 2230.0, {0: 940.0, 1: 720.0, 2: 570.0})
    d = M.spec_delta(before, after)
    assert d["acceptance_per_position"] == pytest.approx([0.86, 0.67, 0.55])
    assert d["mean_acceptance_length"] == pytest.approx(3.08)  # 1 + sum: the seed's spec=3 figure
    assert d["draft_acceptance_rate"] == pytest.approx(2080 / 3000)
    assert d["num_drafts"] == 1000
    assert M.spec_delta(None, after) is None
    idle = M.spec_delta(after, after)
    assert idle["acceptance_per_position"] is None and "no drafts" in idle["reason"]
    restarted = M.spec_delta(after, before)
    assert restarted["mean_acceptance_length"] is None and "backwards" in restarted["reason"]


@pytest.mark.unit
def test_no_spec_counters_means_none() -> None:
    assert M.spec_counters(M.parse_prometheus("vllm:num_requests_running 0\n")) is None


# ---- SSE decoding ------------------------------------------------------------------------------


def _sse(events: list[dict | str], crlf: bool = False) -> bytes:
    sep = "\r\n" if crlf else "\n"
    out = ""
    for e in events:
        out += "data: " + (e if isinstance(e, str) else json.dumps(e, ensure_ascii=False)) + sep + sep
    return out.encode()


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, i, k = b"", 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        part = body[i:i + n]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
        i += n
        k += 1
    return out + b"0\r\n\r\n"


def _raw(body: bytes, cuts: list[int], chunked: bool, t0: float = 100.0, dt: float = 0.01) -> "M.RawStream":
    """A RawStream whose body arrives in pieces cut at ``cuts`` offsets, ``dt`` seconds apart."""
    raw = M.RawStream(t_start=t0 - 0.05, status=200, clean_end=True,
                      headers={"transfer-encoding": "chunked"} if chunked else {"content-type": "text/event-stream"})
    pos = 0
    for j, c in enumerate([*cuts, len(body)]):
        if c > pos:
            raw.pieces.append(body[pos:c])
            raw.times.append(t0 + j * dt)
            pos = c
    return raw


def _chunk(content=None, reasoning=None, usage=None, finish=None, role=False) -> dict:
    delta = {}
    if role:
        delta = {"role": "assistant", "content": ""}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning"] = reasoning
    d = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return d


@pytest.mark.unit
def test_decode_uses_usage_not_chunk_count_under_mtp() -> None:
    """Three tokens per chunk (MTP): decode = (12 - 3) / (t_last - t_first), TTFT skips the role chunk."""
    events = [_chunk(role=True, usage=0), _chunk(content="a b c", usage=3), _chunk(content=" d e f", usage=6),
              _chunk(content=" g h i", usage=9), _chunk(content=" j k l", usage=12, finish="length"),
              {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17}}, "[DONE]"]
    body = _sse(events)
    # one SSE event per piece: cut after every event
    cuts, pos = [], 0
    for e in events[:-1]:
        pos += len(_sse([e]))
        cuts.append(pos)
    res = M.parse_sse(_raw(body, cuts, chunked=False, t0=100.0, dt=0.01))
    d = M.decode_rate(res)
    dec, first, why = d.tok_s, d.first_chunk_tokens, d.reason
    assert why is None and first == 3
    assert dec == pytest.approx(9 / 0.03)
    assert res.ttft == pytest.approx(0.05 + 0.01)  # role chunk at t0 does not count
    assert res.completion_tokens == 12 and res.finish_reason == "length" and res.done
    assert M.itl_samples(res) == pytest.approx([0.01 / 3] * 9)


@pytest.mark.unit
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("sizes", [[7], [1, 50, 3], [10000]])
def test_chunked_framing_split_anywhere_gives_same_events(crlf: bool, sizes: list[int]) -> None:
    events = [_chunk(role=True), *[_chunk(reasoning=f"r{i}", usage=i + 1) for i in range(5)],
              _chunk(content="答え", usage=6, finish="stop"), "[DONE]"]
    framed = _chunked(_sse(events, crlf=crlf), sizes)
    for step in (1, 5, 13, len(framed)):
        raw = _raw(framed, list(range(step, len(framed), step)), chunked=True)
        res = M.parse_sse(raw)
        assert res.reasoning == "r0r1r2r3r4" and res.content == "答え"
        assert res.carrying == 6 and res.tokens_first == 1 and res.tokens_last == 6
        assert res.done and res.error is None


@pytest.mark.unit
def test_event_time_is_the_read_that_completed_it() -> None:
    e1, e2 = _sse([_chunk(content="x", usage=1)]), _sse([_chunk(content="y", usage=2)])
    body = e1 + e2
    raw = _raw(body, [len(e1) - 1, len(e1) + 4], chunked=False, t0=10.0, dt=1.0)
    res = M.parse_sse(raw)
    assert res.marks == [(11.0, 1), (12.0, 2)]  # e1's last byte came with the second read


@pytest.mark.unit
def test_without_per_chunk_usage_decode_only_when_one_token_per_chunk() -> None:
    tail = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}
    one = [_chunk(content=c, finish="length" if c == "d" else None) for c in "abcd"] + [tail]  # no [DONE]: fine
    body = _sse(one)
    res = M.parse_sse(_raw(body, [len(body) // 2], chunked=False))
    d = M.decode_rate(res)
    assert d.reason is None and d.first_chunk_tokens == 1 and not res.done
    assert M.decode_rate(res).source == "chunk_count" and M.decode_rate(res).first_inferred
    multi = [_chunk(content="ab"), _chunk(content="cd", finish="length")] + [tail]
    res2 = M.parse_sse(_raw(_sse(multi), [len(_sse(multi[:1]))], chunked=False))
    d2 = M.decode_rate(res2)
    # 4 tokens in 2 chunks, 0.01 s apart: the first chunk held 1..3 tokens -> 1/0.01 .. 3/0.01 tok/s
    assert d2.source == "chunk_count_bounded" and d2.first_inferred and d2.first_max == 3
    assert d2.bound == {"low": pytest.approx(100.0), "high": pytest.approx(300.0), "missing_chunks": 2}
    assert d2.tok_s == pytest.approx(300.0) and "4 tokens in 2 content chunks" in d2.note
    assert M.itl_samples(res2) is None and "4 tokens came in 2 content chunks" in M.itl_reason(res2)
    nousage = M.parse_sse(_raw(_sse([_chunk(content="a"), _chunk(content="b", finish="stop")]), [], chunked=False))
    assert M.decode_rate(nousage).tok_s is None and "no usage" in M.decode_rate(nousage).reason


@pytest.mark.unit
def test_stream_that_breaks_off_is_an_error() -> None:
    events = [_chunk(content="a", usage=1), _chunk(content="b", usage=2)]
    framed = _chunked(_sse(events), [1000])[:-5]  # chunked body without its terminator
    raw = _raw(framed, [], chunked=True)
    raw.clean_end = False
    res = M.parse_sse(raw)
    assert res.cut and "broke off" in res.error and M.decode_rate(res).tok_s is None


@pytest.mark.unit
def test_http_error_body_becomes_one_line_message() -> None:
    raw = M.RawStream(t_start=0.0, status=400, headers={"content-length": "80"})
    raw.pieces = [json.dumps({"error": {"message": "min_tokens must be less than or equal to max_tokens=4, got 8",
                                        "type": "BadRequestError", "code": 400}}).encode()]
    raw.times = [0.1]
    res = M.parse_sse(raw)
    assert res.error == "HTTP 400: min_tokens must be less than or equal to max_tokens=4, got 8"


@pytest.mark.unit
def test_stream_error_event_is_an_error() -> None:
    res = M.parse_sse(_raw(_sse([_chunk(content="a", usage=1), {"error": {"message": "engine dead"}}]), [],
                               chunked=False))
    assert res.error == "stream error: engine dead"


# ---- statistics ---------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("values", [[1.0], [3.0, 1.0], [5, 1, 4, 2, 3], list(range(100)), [0.1, 0.1, 9.0, 0.2]])
def test_percentiles_match_numpy(values: list[float]) -> None:
    for q in (50, 90, 99):
        assert M.percentile([float(v) for v in values], q) == pytest.approx(float(numpy.percentile(values, q)))
    assert M.percentile([], 50) is None


# ---- telemetry parsing ---------------------------------------------------------------------------


@pytest.mark.unit
def test_spark_nvidia_smi_memory_na_and_meminfo(tmp_path: Path) -> None:
    rows = M.parse_nvidia_smi_csv((FIX / "nvidia-smi-spark-synthetic.txt").read_text())
    assert len(rows) == 1
    r = rows[0]
    assert r["name"] == "NVIDIA GB10" and r["power.draw"] == 41.25 and r["clocks.sm"] == 2405
    assert r["memory.used"] is None and r["memory.total"] is None
    agg = M.aggregate_gpus(rows)
    assert agg["power_w"] == 41.25 and agg["gpu_memory_used_mib"] is None
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal:       127535452 kB\nMemFree:         1000000 kB\nMemAvailable:   100000000 kB\n")
    assert M.read_meminfo(str(mi)) == pytest.approx((127535452 - 100000000) / 1024)


@pytest.mark.unit
def test_nvidia_smi_with_header_and_units_and_two_gpus() -> None:
    text = ("index, name, power.draw [W], temperature.gpu, clocks.sm [MHz], utilization.gpu [%], "
            "memory.used [MiB], memory.total [MiB]\n"
            "0, NVIDIA H200, 120.50 W, 40, 1980 MHz, 85 %, 70000 MiB, 143771 MiB\n"
            "1, NVIDIA H200, 79.50 W, 44, 1020 MHz, 15 %, 1000 MiB, 143771 MiB\n")
    agg = M.aggregate_gpus(M.parse_nvidia_smi_csv(text))
    assert agg == {"power_w": 200.0, "temperature_c": 44.0, "sm_clock_mhz": 1500.0, "utilization_pct": 50.0,
                   "gpu_memory_used_mib": 71000.0}


H200 = sorted(FIX.glob("nvidia-smi-h200-*.txt"))


@pytest.mark.unit
@pytest.mark.skipif(not H200, reason="no recorded H200 nvidia-smi output in tests/fixtures/measure yet")
@pytest.mark.parametrize("path", H200, ids=[p.name for p in H200])
def test_recorded_h200_nvidia_smi_parses(path: Path) -> None:
    rows = M.parse_nvidia_smi_csv(path.read_text(encoding="utf-8", errors="replace"))
    assert rows, f"no GPU rows parsed from {path.name}"
    for r in rows:
        assert r["name"] == "NVIDIA H200"
        for key in ("power.draw", "temperature.gpu", "clocks.sm", "utilization.gpu", "memory.used", "memory.total"):
            assert isinstance(r.get(key), float), (key, r)
        assert r["memory.total"] == 143771


@pytest.mark.unit
def test_h200_header_with_units_reads_like_noheader() -> None:
    """nvidia-smi prints clocks.sm as 'clocks.current.sm [MHz]' in the header: same numbers either way."""
    a = FIX / "nvidia-smi-h200-idle-csv-header-units.txt"
    b = FIX / "nvidia-smi-h200-idle-noheader-nounits.txt"
    if not (a.exists() and b.exists()):
        pytest.skip("H200 idle recordings not present")
    agg_a = M.aggregate_gpus(M.parse_nvidia_smi_csv(a.read_text()))
    agg_b = M.aggregate_gpus(M.parse_nvidia_smi_csv(b.read_text()))
    assert agg_a == agg_b
    assert agg_a == {"power_w": 130.23, "temperature_c": 40.0, "sm_clock_mhz": 1980.0, "utilization_pct": 0.0,
                     "gpu_memory_used_mib": 0.0}


@pytest.mark.unit
def test_h200_under_load_samples() -> None:
    path = FIX / "nvidia-smi-h200-load-noheader-nounits.txt"
    if not path.exists():
        pytest.skip("H200 load recording not present")
    rows = M.parse_nvidia_smi_csv(path.read_text())
    assert max(r["power.draw"] for r in rows) > 400 and max(r["utilization.gpu"] for r in rows) > 90


# ---- quality checks -------------------------------------------------------------------------------


def _res(content: str, finish: str = "stop", reasoning: str = "", error: str | None = None) -> "M.StreamResult":
    r = M.StreamResult(t_start=0.0, status=200 if not error else 500, error=error)
    r.content, r.reasoning, r.finish_reason = content, reasoning, finish
    return r


Q = {q["id"]: q for q in QUALITY["questions"]}


@pytest.mark.unit
@pytest.mark.parametrize("qid,content,finish,expected", [
    ("capital_50", "日本の首都は東京です。", "stop", "pass"),
    ("capital_50", "<think>考え中…東京かな</think>首都は京都です。", "stop", "fail"),  # reasoning excluded
    ("capital_50", "日本の首都は東京です。" * 5, "stop", "fail"),  # 55 characters
    ("capital_50", "", "length", "truncated"),
    ("free_text", "富士山は日本一高い山です。", "stop", "pass"),
    ("free_text", "Mount Fuji is the highest mountain in Japan.", "stop", "fail"),
    ("free_text", "富士山は日本一高い山で", "length", "fail"),  # not finished within budget
    ("arithmetic", "120×3=360円、80×5=400円、合計は７６０円です。", "stop", "pass"),
    ("arithmetic", "合計は760円。ただし税込みでは836円です。", "stop", "fail"),  # the last number counts
    ("arithmetic", "答えは1,760円", "stop", "fail"),
])
def test_quality_checks(qid: str, content: str, finish: str, expected: str) -> None:
    status, details = M.check_quality(Q[qid], _res(content, finish), 4096, None)
    assert status == expected, details


@pytest.mark.unit
def test_quality_request_error_is_error() -> None:
    status, details = M.check_quality(Q["capital_50"], _res("", error="HTTP 500: boom"), 4096, None)
    assert status == "error" and "500" in details["error"]


GOOD = "はい。\n```python\ndef is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n" \
       "        if n % i == 0:\n            return False\n        i += 1\n    return True\n```\n"
BAD = "```python\ndef is_prime(n):\n    return n % 2 == 1\n```"
NET = "```python\nimport socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)\n" \
      "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n```"
WRITE = "```python\nopen('/var/tmp/sparkbench-escape', 'w').write('x')\n" \
        "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n```"


@pytest.mark.unit
def test_code_without_sandbox_is_skipped_never_pass() -> None:
    sb = M.Sandbox.__new__(M.Sandbox)
    sb.kind, sb.protections, sb.reason, sb.image = "none", [], "nothing available", None
    status, details = M.check_quality(Q["code"], _res(GOOD), 4096, sb)
    assert status == "skipped" and details["sandbox"]["kind"] == "none"


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare not installed")
def test_unshare_sandbox_runs_asserts_and_blocks_network_and_writes() -> None:
    sb = M.Sandbox(None)
    if sb.kind != "unshare":
        pytest.skip(f"unshare sandbox unavailable here: {sb.reason}")
    assert "network-namespace:no-network" in sb.protections
    assert M.check_quality(Q["code"], _res(GOOD), 4096, sb)[0] == "pass"
    assert M.check_quality(Q["code"], _res(BAD), 4096, sb)[0] == "fail"
    status, details = M.check_quality(Q["code"], _res(NET), 4096, sb)
    assert status == "fail" and "Network is unreachable" in details["output_tail"]
    if "mount-namespace:read-only-filesystem" in sb.protections:
        status, details = M.check_quality(Q["code"], _res(WRITE), 4096, sb)
        assert status == "fail" and "Read-only file system" in details["output_tail"]
        assert not Path("/var/tmp/sparkbench-escape").exists()
    scratch = M.Sandbox.run(sb, "open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())\n")
    assert scratch == (True, "ok\n")  # the working directory stays writable
    assert M.check_quality(Q["code"], _res("no code here"), 4096, sb)[0] == "fail"


def _docker_images() -> list[str]:
    """Local images to try the Docker sandbox with: the base image, and the simulator image whose
    entrypoint is `vllm serve` like the real vLLM image (make setup builds both)."""
    if shutil.which("docker") is None:
        return []
    out = []
    for image in ("sparkbench/debian-base:bookworm", "sparkbench/vllm-sim:latest"):
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0:
            out.append(image)
    return out


@pytest.mark.sim
@pytest.mark.skipif(not _docker_images(), reason="docker or the sparkbench images not available (make setup)")
@pytest.mark.parametrize("image", _docker_images() or ["none"])
def test_docker_sandbox_runs_asserts_without_network(image: str) -> None:
    sb = M.Sandbox(image)
    assert sb.kind == "docker" and "network:none" in sb.protections and "cap-drop:ALL" in sb.protections
    assert M.check_quality(Q["code"], _res(GOOD), 4096, sb)[0] == "pass"
    assert M.check_quality(Q["code"], _res(BAD), 4096, sb)[0] == "fail"
    status, details = M.check_quality(Q["code"], _res(NET), 4096, sb)
    assert status == "fail" and "Network is unreachable" in details["output_tail"]
    status, details = M.check_quality(Q["code"], _res(WRITE), 4096, sb)
    assert status == "fail" and "Read-only file system" in details["output_tail"]


@pytest.mark.sim
def test_missing_sandbox_image_is_not_pulled_and_falls_back() -> None:
    sb = M.Sandbox("sparkbench/no-such-image:never")
    assert sb.kind in ("unshare", "none")
    assert sb.kind == "unshare" or "not on this host" in sb.reason


# ---- image ---------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("shape", ["square", "circle", "triangle"])
def test_png_decodes_with_pillow_and_has_the_colour(shape: str) -> None:
    img = QUALITY["image"]
    colour = img["colours"]["purple"]
    png = M.make_png(64, 64, img["background"], colour, shape)
    pic = Image.open(io.BytesIO(png))
    pic.load()
    assert pic.size == (64, 64) and pic.mode == "RGB"
    assert pic.getpixel((32, 36)) == tuple(colour)
    assert pic.getpixel((0, 0)) == (255, 255, 255)
    counts = {c for _, c in pic.getcolors()}
    assert counts == {tuple(colour), (255, 255, 255)}


@pytest.mark.unit
def test_colour_answer_check() -> None:
    pal = list(QUALITY["image"]["colours"])
    assert M.names_colour("Red.", "red", pal)[0]
    assert M.names_colour("The shape is RED", "red", pal)[0]
    assert not M.names_colour("Reddish", "red", pal)[0]
    assert not M.names_colour("red, green or blue", "red", pal)[0]
    assert not M.names_colour("Blue", "red", pal)[0]


# ---- endpoint ------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("url,display,prefix", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000", ""),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", ""),
    ("https://user:secret@example.com/api/v1/", "https://example.com:443/api", "/api"),
    ("http://[::1]:8000", "http://[::1]:8000", ""),
])
def test_endpoint_url_handling(url: str, display: str, prefix: str) -> None:
    ep = M.Endpoint.from_url(url, "sk-x")
    assert ep.display == display and ep.prefix == prefix and "secret" not in ep.display
    assert ep.headers()["Authorization"] == "Bearer sk-x"
    request = measure_client._build_post(ep, "/v1/chat/completions", b"{}")
    assert request.startswith(f"POST {prefix}/v1/chat/completions HTTP/1.1\r\n".encode())
    assert b"\r\nConnection: close\r\n" in request and request.endswith(b"\r\n\r\n{}")


# ---- schema ----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_schema_accepts_a_failure_record_and_rejects_broken_documents() -> None:
    import jsonschema
    schema = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    record = {"schema_version": "1", "status": "failed", "simulated": None, "host": "spark-sim01",
              "errors": [{"phase": "launch", "request": None, "message": "could not select device driver"}],
              "failure": {"stage": "launch", "reason": "no NVIDIA runtime", "remedy": "install the toolkit"}}
    assert not list(v.iter_errors(record))
    assert list(v.iter_errors({**record, "status": "complete"}))  # only a failure may omit the figures
    assert list(v.iter_errors({**record, "errors": ["a bare string"]}))
    assert list(v.iter_errors({**record, "schema_version": 1}))
    assert list(v.iter_errors({"schema_version": "1", "status": "complete", "simulated": False}))
