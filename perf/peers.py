"""Peers for table 1: AIPerf and GuideLLM, installed into throwaway venvs under perf/.work/.

Offline (no Hugging Face here) both need local JSONL prompts; AIPerf also needs a local
tokenizer folder (built here with the `tokenizers` package: a word-level vocabulary, saved as
`tokenizer.json` + `tokenizer_config.json`) and `--use-server-token-count`. Both are given the
same forced length as measure.py (`ignore_eos`, `min_tokens` = `max_tokens` = N).

Figures taken from their own outputs:

- AIPerf (`profile_export_aiperf.json`): decode = median of ``output_token_throughput_per_user``
  (per request 1 / ITL, ITL = (E2E − TTFT) / (OSL − 1)); throughput = ``output_token_throughput``
  (total output tokens / benchmark duration).
- GuideLLM (`--output kind=json`): decode = 1000 / median per-request ``inter_token_latency_ms``
  (ITL = (t_last − t_first) / (N − 1)); throughput = mean ``output_tokens_per_second``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from perf.common import WORK, PerfError, median, rel_err

NAMES = ("AIPerf", "GuideLLM")
PINS = {"AIPerf": "aiperf==0.13.0", "GuideLLM": "guidellm==0.8.1"}
VENV = {"AIPerf": WORK / "aiperf-venv", "GuideLLM": WORK / "guidellm-venv"}
EXE = {"AIPerf": "aiperf", "GuideLLM": "guidellm"}
TOKENIZER = WORK / "peer-tokenizer"
PROMPTS = WORK / "peer-prompts.jsonl"
_notes: list[str] = []


def notes() -> list[str]:
    """Why a peer had no figure somewhere (shown under table 1)."""
    return sorted(set(_notes))


def _install(name: str) -> None:
    venv = VENV[name]
    exe = venv / "bin" / EXE[name]
    if exe.exists():
        return
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        PINS[name]], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0 or not exe.exists():
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfError(f"pip install {PINS[name]} failed: {tail}")


def _tokenizer() -> None:
    if (TOKENIZER / "tokenizer.json").exists():
        return
    TOKENIZER.mkdir(parents=True, exist_ok=True)
    code = r"""
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
words = ["[UNK]", "<s>", "</s>"] + [f"w{i}" for i in range(4000)] + [chr(c) for c in range(33, 127)]
tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(sys.argv[1] + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 1000000}, open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""
    r = subprocess.run([str(VENV["AIPerf"] / "bin" / "python"), "-c", code, str(TOKENIZER)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PerfError("could not build the local tokenizer folder for AIPerf: "
                        + (r.stderr.strip().splitlines() or ["?"])[-1])


def prepare(quick: bool = False) -> bool:
    """Install both peers, write the prompts and the tokenizer; True when ready.

    Raises PerfError (one line) when a peer cannot be installed here.
    """
    WORK.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        _install(name)
    _tokenizer()
    with open(PROMPTS, "w") as f:
        for i in range(128):
            f.write(json.dumps({"text": f"w{i} w{i + 1} w{i + 2} Write a long essay about "
                                        f"topic number {i}."}) + "\n")
    return True


def _run(cmd: list[str], cwd: Path, timeout: float, offline: bool = True) -> subprocess.CompletedProcess:
    """Run a peer with a private HF_HOME; ``offline`` also sets HF_HUB_OFFLINE=1.

    AIPerf 0.13.0 cannot load a local tokenizer folder when HF_HUB_OFFLINE=1 is set (it then
    validates the path as a Hub repo id and exits 1, checked here), so it runs without that
    variable; it downloads nothing either way — its tokenizer is the local folder.
    """
    env = dict(os.environ, NO_COLOR="1", HF_HOME=str(WORK / "hf-home"))
    if offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _first_error(log: Path | None, r: subprocess.CompletedProcess) -> str:
    """The first ERROR line of a peer's log (else its last output line), without paths."""
    lines: list[str] = []
    if log is not None and log.exists():
        lines = [l for l in log.read_text(errors="replace").splitlines() if " ERROR " in l]
    if not lines:
        lines = (r.stderr or r.stdout or "no output").strip().splitlines()[-1:]
    msg = lines[0].split(" ERROR - ", 1)[-1] if lines else "no output"
    return msg.replace(str(WORK), "perf/.work")[:240]


def run_aiperf(url: str, model: str, streams: int, tokens: int, count: int, tag: str, *,
               tokenizer: Path = TOKENIZER, prompts: Path = PROMPTS,
               server_counts: bool = True) -> dict[str, Any]:
    """One AIPerf run; its decode (median per-user tok/s) and throughput figures.

    ``tokenizer`` / ``prompts`` point it at another model's tokenizer folder and prompt file
    (table 6: the real vLLM model's own tokenizer); ``server_counts=False`` drops
    ``--use-server-token-count --per-chunk-usage``, so AIPerf counts output tokens with that
    tokenizer. ``export`` in the answer is AIPerf's artifact folder (per-request records).
    """
    out = WORK / f"aiperf_{tag}"
    counts = ["--use-server-token-count", "--per-chunk-usage"] if server_counts else []
    cmd = [str(VENV["AIPerf"] / "bin" / "aiperf"), "profile", "--model", model, "--url", url,
           "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer),
           *counts, "--input-file", str(prompts),
           "--custom-dataset-type", "single_turn", "--concurrency", str(streams),
           "--request-count", str(count), "--osl", str(tokens),
           "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{tokens}",
           "--output-artifact-dir", str(out), "--ui", "none"]
    r = _run(cmd, WORK, 600, offline=False)
    f = out / "profile_export_aiperf.json"
    if r.returncode != 0 or not f.exists():
        return {"error": f"AIPerf exit {r.returncode}: {_first_error(out / 'logs' / 'aiperf.log', r)}"}
    d = json.loads(f.read_text())
    per_user = d.get("output_token_throughput_per_user") or {}
    return {"decode": per_user.get("p50"),
            "combined": (d.get("output_token_throughput") or {}).get("avg"), "export": str(out)}


def run_guidellm(url: str, model: str, streams: int, tokens: int, count: int, tag: str, *,
                 prompts: Path = PROMPTS) -> dict[str, Any]:
    """One GuideLLM run (scenario file); its decode (1000 / median ITL ms) and throughput.

    ``prompts`` points it at another prompt file; ``export`` in the answer is its JSON output.
    """
    out = WORK / f"guidellm_{tag}.json"
    out.unlink(missing_ok=True)
    profile = {"kind": "synchronous"} if streams == 1 else {"kind": "concurrent", "streams": streams}
    scen = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": model,
                    "request_format": "/v1/chat/completions", "stream": True, "max_tokens": tokens,
                    "extras": {"body": {"ignore_eos": True, "min_tokens": tokens,
                                        "max_tokens": tokens}}},
        "profile": profile, "constraints": [{"kind": "max_requests", "count": count}],
        "data": [{"kind": "json_file", "path": str(prompts)}],
        "outputs": [{"kind": "json", "path": str(out)}]}}
    sf = WORK / f"guidellm_{tag}.scenario.json"
    sf.write_text(json.dumps(scen))
    r = _run([str(VENV["GuideLLM"] / "bin" / "guidellm"), "run", "-c", str(sf),
              "--disable-console-interactive"], WORK, 600)
    if r.returncode != 0 or not out.exists():
        return {"error": f"GuideLLM exit {r.returncode}: {_first_error(None, r)}"}
    b = json.loads(out.read_text())["benchmarks"][0]
    itls = [q["inter_token_latency_ms"] for q in b["requests"]["successful"]
            if q.get("inter_token_latency_ms")]
    itl = median(itls)
    return {"decode": 1000.0 / itl if itls and itl > 0 else None,
            "combined": b["metrics"]["output_tokens_per_second"]["successful"]["mean"], "export": str(out)}


def run_case(name: str, sim: Any, streams: int, tokens: int, count: int,
             truth_decode: Callable, truth_combined: Callable, new_rows: Callable) -> dict[str, Any]:
    """Run one peer against the running simulator and score it against that server's timeline.

    ``count`` requests at 1 stream, else one wave of ``streams`` requests (like measure.py).
    Errors: decode_err = (peer decode − median truth decode) / median truth decode;
    combined_err = (peer throughput − truth combined) / truth combined over the same requests.
    """
    before = {r["id"] for r in sim.requests()}
    n = count if streams == 1 else streams
    tag = f"{sim.port}_{streams}_{sim.rate:g}_{'mtp' if sim.mtp else 'bare'}"
    fn = run_aiperf if name == "AIPerf" else run_guidellm
    try:
        res = fn(sim.url, "nvidia/Qwen3.6-35B-A3B-NVFP4", streams, tokens, n, tag)
    except subprocess.TimeoutExpired:
        res = {"error": f"{name} did not finish within 600 s"}
    if res.get("error"):
        _notes.append(f"{name}: {res['error']}")
        return res
    rows = new_rows(before, sim.requests(), tokens)
    if len(rows) < n:
        res["error"] = f"{name}: only {len(rows)} of {n} requests reached the forced length"
        _notes.append(res["error"])
        return res
    t_dec = median(truth_decode(r) for r in rows)
    t_comb = truth_combined(rows)
    res["decode_err"] = rel_err(res["decode"], t_dec) if res.get("decode") and t_dec else None
    res["combined_err"] = rel_err(res["combined"], t_comb) if res.get("combined") and t_comb else None
    return res
