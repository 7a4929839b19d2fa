"""The one option table: every measurement setting and every command-line option of measure.

Each ``Option`` says once what a setting is called (the inventory's ``llm_bench_<key>``, the
command line's flag, the result's ``settings.<result_key>``), its type, default, bounds, help and
the phase it belongs to. Everything else is derived from this table: measure's argparse parser
(``cli.build_parser``), the controller's ``sparkbench.settings`` (``DEFAULTS``, the checks of
inventory values, ``normalize``, ``measure_argv``, and so the configuration hash), the result's
``settings`` block (``document.settings_block``) and the settings table in docs/MEASUREMENT.md
(``settings_table``). Cross-field rules (``cross_errors``) are written once too, and name each
field the way its reader spells it (a flag on the command line, a variable in the inventory).

Kinds: ``int`` and ``float`` (with ``minimum``, ``strict`` for an open bound, ``maximum``,
``allow_inf``), ``int_list`` (comma-separated on the command line, ``none`` for empty),
``rate_list`` (requests/s > 0 or ``inf``), ``slo`` (``ttft=S,tpot=S,e2e=S``), ``flag``
(store_true), ``choice``, ``url``, ``command`` (a command line, shell-split where used) and
``text``. ``nullable``: None is a value (off, or a default computed elsewhere; ``null_means``
says which).
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union
from urllib.parse import urlsplit

SLO_KEYS = ("ttft", "tpot", "e2e")
#: An option's typed value (``parse_value``): a number, a text, a flag, a list of numbers, an SLO
#: (``{ttft|tpot|e2e: seconds}``), or None (unset).
OptionValue = Union[None, bool, int, float, str, list[int], list[float], dict[str, float]]


@dataclass(frozen=True)
class Option:
    """One setting or command-line option (see the module docstring)."""

    key: str  # the setting's name: llm_bench_<key> in the inventory, the table's row
    flag: str  # the command-line option
    kind: str
    default: Any  # measure's default (what the command line means when the option is absent)
    help: str
    phase: str  # the phase it belongs to (``run`` for the whole run)
    setting: bool = True  # an inventory setting (llm_bench_<key>); False: measure's command line only
    setting_default: Any = "="  # the inventory's default when it differs from measure's ("=": the same)
    minimum: float | None = None
    strict: bool = False  # minimum excluded
    maximum: float | None = None
    allow_inf: bool = False
    nullable: bool = False
    null_means: str = "off"
    choices: tuple[str, ...] = ()
    example: str = ""  # shown in the inventory's error message: "(e.g. ...)"
    off_zero: bool = False  # 0 turns its phase off
    metavar: str | None = None
    what: str = ""  # the value in words where the kind and bounds do not say it well
    result_key: str | None = None  # the key in the result's settings block (default: the dest)
    required: bool = False

    @property
    def dest(self) -> str:
        """argparse's attribute name."""
        return self.flag[2:].replace("-", "_")

    @property
    def variable(self) -> str:
        """The inventory variable."""
        return f"llm_bench_{self.key}"

    @property
    def inventory_default(self) -> Any:
        return self.default if self.setting_default == "=" else self.setting_default


def _o(*args: Any, **kw: Any) -> Option:
    return Option(*args, **kw)


#: Every option, in the order of the result's settings block.
OPTIONS: tuple[Option, ...] = (
    _o("base_url", "--base-url", "url", None, "server URL, e.g. http://127.0.0.1:8000", "run", setting=False,
       required=True),
    _o("model", "--model", "text", None, "model id (default: the first model of /v1/models)", "run", setting=False,
       metavar="NAME"),
    _o("output_tokens", "--output-tokens", "int", 256, "tokens forced per speed request", "single", minimum=1,
       example="256"),
    _o("runs", "--runs", "int", 5, "single-stream runs (5: the fewest per side a verdict can use)", "single",
       minimum=1, example="5"),
    _o("warmup", "--warmup", "int", 1, "warm-up requests, not counted", "warmup", minimum=0, example="1"),
    _o("concurrency", "--concurrency", "int_list", [2, 4, 8], "parallel levels, e.g. 2,4,8, or 'none'", "parallel",
       minimum=1, what="a list of parallel levels >= 1 (e.g. [2, 4, 8]) or [] for none"),
    _o("context", "--context", "int_list", [0], "prompt depths in tokens for prefill tok/s, e.g. 4096,16384 "
       "(0 = skip)", "context", minimum=0, what="a list of prompt depths >= 0 tokens (e.g. [0] or [4096, 16384])"),
    _o("quality", "--quality", "flag", False, "run the four quality checks", "quality", setting_default=True),
    _o("quality_max_tokens", "--quality-max-tokens", "int", 4096, "token budget of each quality and image "
       "request", "quality", minimum=1, example="4096"),
    _o("quality_file", "--quality-file", "text", None, "quality prompts and checks (default: measure.pyz's own "
       "quality.json, else the one beside the measure package, else sparkbench/data/prompts/quality.json)", "quality", setting=False,
       metavar="FILE"),
    _o("sandbox_image", "--sandbox-image", "text", None, "Docker image already on this host (with python3) to run "
       "generated code in", "quality", setting=False, metavar="IMAGE"),
    _o("image", "--image", "flag", False, "run the image-input check", "image", setting_default=True),
    _o("telemetry", "--telemetry", "choice", "auto", "sample nvidia-smi once a second per phase when it exists",
       "run", choices=("auto", "off")),
    _o("nvidia_smi", "--nvidia-smi", "command", None, "the nvidia-smi command line, shell-split, e.g. 'docker exec "
       "C nvidia-smi' (default: nvidia-smi from PATH); 'none': this host has no GPU (telemetry off)", "run",
       setting=False, metavar="CMD"),
    _o("kernel_log", "--kernel-log", "command", "dmesg", "command printing the kernel log, shell-split, for new GPU "
       "Xid and OOM-killer lines ('off' to skip)", "run", setting=False, metavar="CMD"),
    _o("request_timeout_s", "--request-timeout", "float", 600.0, "seconds one request may take", "run", minimum=0, metavar="S",
       strict=True, setting_default=600, what="a number of seconds > 0", result_key="request_timeout"),
    _o("stall_timeout_s", "--stall-timeout", "float", 60.0, "seconds without a byte before the run stops as "
       "incomplete", "run", minimum=0, strict=True, setting_default=60, metavar="S", what="a number of seconds > 0",
       result_key="stall_timeout"),
    _o("out", "--out", "text", None, "output JSON file, or - for stdout", "run", setting=False, required=True,
       metavar="FILE|-"),
    _o("hardware", "--hardware", "text", None, "hardware profile (a name in --profiles-dir, e.g. dgx-spark, or a "
       "JSON file): the result carries it as profile.hardware so the roofline can be computed", "run",
       setting=False, metavar="NAME|FILE"),
    _o("bandwidth_probe", "--bandwidth-probe", "command", None, "command printing the bandwidth probe's JSON, run "
       "before the first request and after the last into protocol.bandwidth (default with --hardware in the "
       "checkout: python3 sparkbench/bandwidth/probe.py --device cuda, or cpu for a CPU profile; 'off' to skip)",
       "run", setting=False, metavar="CMD"),
    _o("profiles_dir", "--profiles-dir", "text", None, "where --hardware names and model profiles are looked up "
       "(default: sparkbench's built-in profiles, the checkout's profiles/ over them, else the directory "
       "measure runs from)", "run", setting=False,
       metavar="DIR"),
    _o("target_precision_pct", "--target-precision", "float", None, "after --runs valid runs, keep measuring "
       "single-stream requests until the 95 %% bootstrap interval of the median decode rate has a half-width "
       "<= PCT %% of the median (or --max-runs)", "single", minimum=0, strict=True, nullable=True,
       metavar="PCT", what="a percentage > 0 of the median (e.g. 1.5)", result_key="target_precision_pct"),
    _o("max_runs", "--max-runs", "int", None, "most single-stream runs in all with --target-precision",
       "single", minimum=1, nullable=True, null_means="4 × llm_bench_runs", metavar="N", example="20"),
    _o("rates", "--rate", "rate_list", None, "arrival-rate phase: request rates in req/s, comma-separated, e.g. "
       "0.5,1,2,4 ('inf' sends all at once)", "rates", setting_default=[], metavar="LIST", result_key="rate"),
    _o("rate_duration_s", "--rate-duration", "float", 30.0, "seconds over which each rate's requests are "
       "scheduled: round(rate x S) requests, at least 1", "rates", minimum=0, strict=True, setting_default=30,
       metavar="S", what="a number of seconds > 0 (e.g. 30)", result_key="rate_duration_s"),
    _o("rate_requests", "--rate-requests", "int", None, "requests per rate instead of --rate-duration (needed for "
       "inf)", "rates", minimum=1, nullable=True, null_means="rate × llm_bench_rate_duration_s", metavar="N"),
    _o("burstiness", "--burstiness", "float", 1.0, "gamma shape of the gaps as vllm bench serve: 1 = Poisson, "
       "< 1 burstier, inf = constant gaps", "rates", minimum=0, strict=True, allow_inf=True, metavar="K",
       what="a number > 0 (1 = Poisson)"),
    _o("rate_seed", "--rate-seed", "int", 0, "seed of the arrival schedule", "rates", minimum=0, metavar="N"),
    _o("rate_max_concurrency", "--rate-max-concurrency", "int", None, "at most N rate-phase requests in flight "
       "(vllm's --max-concurrency; the concurrency search's first level)", "rates", minimum=1, nullable=True,
       null_means="no limit", metavar="N"),
    _o("slo", "--slo", "slo", None, "service-level objectives in seconds, any subset: a request is good when it "
       "completed and meets every one (goodput, slo_met_share)", "rates",
       setting_default={"ttft": 2.0, "tpot": 0.05, "e2e": 30.0}, metavar="ttft=S,tpot=S,e2e=S"),
    _o("rate_search", "--rate-search", "float", None, "after the --rate list, search the highest rate (or level "
       "in flight, --search-by concurrency) whose slo_met_share >= TARGET (0-1; needs --slo)", "rates",
       minimum=0, strict=True, maximum=1, nullable=True, metavar="TARGET",
       what="a share of requests meeting the SLO in (0, 1] (e.g. 0.9)"),
    _o("search_by", "--search-by", "choice", "rate", "what --rate-search varies: the arrival rate, or the number "
       "of requests in flight (closed loop: rate inf with --rate-max-concurrency N; --rate-requests per level, "
       "default max(8, 4 N))", "rates", choices=("rate", "concurrency")),
    _o("replay", "--replay", "text", None, "arrival-rate phase from a workload file: lines {offset_s, prompt | "
       "prompt_tokens, output_tokens}, each sent at its offset", "rates", setting=False, metavar="FILE.jsonl"),
    _o("prefix_tokens", "--prefix-tokens", "int", 0, "prefix-cache phase: tokens of the system prompt every "
       "request shares", "prefix_cache", minimum=0, off_zero=True, metavar="N", example="4096"),
    _o("prefix_requests", "--prefix-requests", "int", 8, "prefix-cache requests, sent one at a time; the first is "
       "cold (fills the cache), the others are measured", "prefix_cache", minimum=2, metavar="N", example="8"),
    _o("prefix_suffix_tokens", "--prefix-suffix-tokens", "int", 64, "each prefix-cache request's own user suffix "
       "in tokens", "prefix_cache", minimum=1, metavar="N", example="64"),
    _o("prefix_output_tokens", "--prefix-output-tokens", "int", 16, "tokens forced per prefix-cache request",
       "prefix_cache", minimum=1, metavar="N", example="16"),
    _o("turns", "--turns", "int", 0, "multi-turn phase: turns per conversation, each re-sending the history",
       "multi_turn", minimum=0, off_zero=True, metavar="N", example="4"),
    _o("conversations", "--conversations", "int", 2, "multi-turn conversations, interleaved round robin",
       "multi_turn", minimum=1, metavar="N", example="2"),
    _o("turn_tokens", "--turn-tokens", "int", 256, "new user tokens per turn", "multi_turn", minimum=1,
       metavar="N", example="256"),
    _o("turn_output_tokens", "--turn-output-tokens", "int", 64, "tokens forced per turn's answer", "multi_turn",
       minimum=1, metavar="N", example="64"),
    _o("tools", "--tools", "flag", False, "run the tool-call check (prompts and tools from --tools-file; "
       "BFCL-style verdicts)", "tools"),
    _o("tools_file", "--tools-file", "text", None, "tools and prompts (default: measure.pyz's own tools.json, "
       "else the one beside the measure package, else sparkbench/data/prompts/tools.json)", "tools", setting=False,
       metavar="FILE"),
    _o("tools_skip", "--tools-skip", "text", None, "with --tools: send nothing and record every prompt as skipped "
       "with REASON (the plan's refusal of a check the server cannot answer, with its fix)", "tools",
       setting=False, metavar="REASON"),
    _o("tool_choice", "--tool-choice", "choice", "auto", "tool_choice of the check's requests: auto (needs the "
       "server's --enable-auto-tool-choice --tool-call-parser), required or named (structured outputs; prompts "
       "that need no call are skipped)", "tools", choices=("auto", "required", "named")),
    _o("tools_max_tokens", "--tools-max-tokens", "int", 512, "max_tokens of each tool-call request", "tools",
       minimum=1, example="512"),
)

BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
#: The inventory's settings (``llm_bench_<key>``), in table order.
SETTINGS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.setting)


# ---- values: parsing and checking -----------------------------------------------------------------


class BadValue(ValueError):
    """A value that breaks its option's rule; the message says what it must be."""


def _bounds_text(o: Option, whole: bool) -> str:
    lo = o.minimum
    if o.what:
        return o.what
    if whole:
        return f"a whole number >= {lo:g}" if lo is not None else "a whole number"
    rel = ">" if o.strict else ">="
    return f"a number {rel} {lo:g}" if lo is not None else "a number"


def _in_bounds(o: Option, v: float) -> bool:
    if isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and not o.allow_inf)):
        return False
    if o.minimum is not None and (v <= o.minimum if o.strict else v < o.minimum):
        return False
    return o.maximum is None or v <= o.maximum


def _number(o: Option, value: Any) -> int | float:
    """An int or float option's value from text or a number; BadValue when it breaks the rule."""
    if isinstance(value, bool):
        raise BadValue(_bounds_text(o, o.kind == "int"))
    try:
        if o.kind == "int":
            v: int | float = value if isinstance(value, int) else int(str(value).strip())
        else:
            v = float(value) if isinstance(value, (int, float)) else float(str(value).strip())
    except ValueError:
        raise BadValue(_bounds_text(o, o.kind == "int")) from None
    if not _in_bounds(o, v):
        raise BadValue(_bounds_text(o, o.kind == "int"))
    return v


def _items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [] if value.strip().lower() in ("none", "") else [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise BadValue("a list")


def _int_list(o: Option, value: Any) -> list[int]:
    out = []
    for item in _items(value):
        try:
            n = item if isinstance(item, int) and not isinstance(item, bool) else int(str(item).strip())
        except ValueError:
            raise BadValue(o.what, item) from None
        if isinstance(item, bool) or (o.minimum is not None and n < o.minimum):
            raise BadValue(o.what, item)
        out.append(n)
    return out


def _rate_list(value: Any) -> list[float]:
    out = []
    for item in _items(value):
        try:
            v = float(item) if not isinstance(item, bool) else math.nan
        except ValueError:
            raise BadValue("request rates > 0 per second or inf (e.g. [0.5, 1, 2])", item) from None
        if math.isnan(v) or v <= 0:
            raise BadValue("request rates > 0 per second or inf (e.g. [0.5, 1, 2])", item)
        out.append(v)
    return out


def _slo(value: Any) -> dict[str, float]:
    if isinstance(value, str):
        pairs = []
        for part in value.split(","):
            key, eq, val = part.strip().partition("=")
            if not eq:
                raise BadValue(f"KEY=SECONDS items, keys among {', '.join(SLO_KEYS)} (e.g. ttft=2,tpot=0.05,e2e=30)")
            pairs.append((key.strip().lower(), val))
    elif isinstance(value, Mapping) and value:
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        raise BadValue("a mapping of ttft / tpot / e2e to seconds (e.g. {ttft: 2, tpot: 0.05, e2e: 30})")
    out: dict[str, float] = {}
    for key, val in pairs:
        try:
            v = float(val) if not isinstance(val, bool) else math.nan
        except (TypeError, ValueError):
            v = math.nan
        if key not in SLO_KEYS or not math.isfinite(v) or v < 0 or key in out:
            raise BadValue("ttft, tpot or e2e (each once) with a number of seconds >= 0", f"{key}: {val!r}")
        out[key] = v
    return out


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off", ""):
        return False
    raise BadValue("true or false")


def is_null(value: Any) -> bool:
    """None for an unset optional setting (None, "", or "null"/"none" as ``-e`` spells it)."""
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none", "~"))


def parse_value(o: Option, value: Any) -> Any:
    """The option's typed value from command-line text or an inventory value; BadValue when it
    breaks the option's rule (``args[1]``, when given, is the offending item of a list)."""
    if o.nullable and is_null(value):
        return None
    if o.kind in ("int", "float"):
        return _number(o, value)
    if o.kind == "int_list":
        return _int_list(o, value)
    if o.kind == "rate_list":
        return _rate_list(value)
    if o.kind == "slo":
        return _slo(value)
    if o.kind == "flag":
        return _flag(value)
    if o.kind == "choice":
        if str(value) not in o.choices:
            raise BadValue(f"one of {', '.join(o.choices)}")
        return str(value)
    if o.kind == "url":
        return _url(value)
    if o.kind == "command":
        return _command(o, value)
    return str(value)


def _url(text: str) -> str:
    p = urlsplit(text)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise BadValue("an http:// or https:// URL with a host")
    try:
        p.port
    except ValueError:
        raise BadValue("a URL with a valid port") from None
    return text.rstrip("/")


def _command(o: Option, text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError as exc:
        raise BadValue(f"{text!r} is not a command line ({exc}); fix the quoting") from None
    if not parts:
        example = f"'docker exec NAME {o.flag[2:]}'" if o.key == "nvidia_smi" else "dmesg"
        raise BadValue(f"{o.flag} needs a command, e.g. {o.flag} {example}")
    return text


def setting_error(o: Option, value: Any) -> str | None:
    """The inventory's message for a bad ``llm_bench_<key>`` value (None when it is fine): the
    variable, the value, what it must be and an example."""
    try:
        parse_value(o, value)
        return None
    except BadValue as exc:
        must = str(exc.args[0])
        item = exc.args[1] if len(exc.args) > 1 else None
    if o.nullable:
        must = f"null ({o.null_means}) or {must}"
    note = "; ".join(x for x in (f"e.g. {o.example}" if o.example else "", "0 = off" if o.off_zero else "") if x)
    tail = f" ({note})" if note and not o.what else ""
    if item is not None and o.kind == "slo":
        return f"{o.variable} has {item}; use {must}"
    if item is not None:
        return f"{o.variable} has {item!r}; it must be {must}"
    return f"{o.variable} is {value!r}; it must be {must}{tail}"


# ---- rules across options ------------------------------------------------------------------------


def cross_errors(values: Mapping[str, OptionValue], name: Callable[[str], str], unset: str = "null"
                 ) -> list[tuple[str, str]]:
    """Problems between options as (key, message), over typed values keyed by option key (missing
    keys take the table's measure defaults); ``name(key)`` spells an option for the reader (a flag
    or a variable), ``unset`` says how an option without a value reads ("null", "not given")."""
    v = {o.key: o.default for o in OPTIONS}
    v.update(values)
    out: list[tuple[str, str]] = []
    if v["max_runs"] is not None:
        if v["max_runs"] < v["runs"]:
            out.append(("max_runs", f"{name('max_runs')} is {v['max_runs']}, fewer than {name('runs')} {v['runs']}; "
                        f"set it >= {v['runs']} or leave it {unset} (4 × {name('runs')})"))
        elif v["target_precision_pct"] is None:
            out.append(("max_runs", f"{name('max_runs')} is {v['max_runs']} but {name('target_precision_pct')} is "
                        f"{unset}: the limit only applies to a target precision; set "
                        f"{name('target_precision_pct')} or leave {name('max_runs')} {unset}"))
    if v["search_by"] == "concurrency" and (v["rate_search"] is None or not v["slo"]):
        out.append(("search_by", f"{name('search_by')} concurrency searches with {name('rate_search')} (a target "
                    f"share) and needs {name('slo')} (what a good request is), e.g. --search-by concurrency "
                    "--rate-search 0.9 --slo ttft=2,e2e=30"))
    if v["rate_search"] is not None and v["search_by"] == "rate":
        if not v["rates"]:
            out.append(("rate_search", f"{name('rate_search')} is set but {name('rates')} is empty: the rate search "
                        f"starts from the listed rates; list some (e.g. [0.5, 1, 2]), or set "
                        f"{name('search_by')}: concurrency"))
        elif not v["slo"]:
            out.append(("rate_search", f"{name('rate_search')} needs {name('slo')} (what a good request is)"))
    if v["rates"] and any(math.isinf(r) for r in v["rates"]) and v["rate_requests"] is None:
        out.append(("rates", f"an inf rate in {name('rates')} sends every request at once, so it needs "
                    f"{name('rate_requests')} N"))
    return out


# ---- the settings table of docs/MEASUREMENT.md ---------------------------------------------------------


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {x:g}" for k, x in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def rule_text(o: Option) -> str:
    """What a value must be, in words (the docs table's "allowed" column)."""
    if o.kind == "choice":
        text = " or ".join(f"`{c}`" for c in o.choices)
    elif o.kind == "flag":
        text = "true or false"
    elif o.kind == "slo":
        text = "any of ttft, tpot, e2e: seconds >= 0"
    elif o.kind == "rate_list":
        text = "requests/s > 0 or inf"
    else:
        text = o.what or _bounds_text(o, o.kind == "int")
    return f"null ({o.null_means}) or {text}" if o.nullable else text


def metavar(o: Option) -> str:
    """The option's value as the help and the docs show it."""
    if o.metavar:
        return o.metavar
    return {"int": "N", "float": "X", "int_list": "LIST", "url": "URL", "choice": "|".join(o.choices)}.get(
        o.kind, o.dest.upper())


def _default_text(o: Option) -> str:
    if o.required:
        return "required"
    if o.default is None or o.default == []:
        return "off" if o.kind in ("rate_list", "slo") or o.nullable else "none"
    return f"`{_shown(o.default)}`"


def options_table() -> str:
    """The Markdown table of every option of measure (docs/MEASUREMENT.md, "Options"): its flag, the
    inventory variable that sets it (with that default where it differs), default, allowed values,
    phase and meaning."""
    rows = ["| option | inventory variable | default | allowed | phase | meaning |", "|---|---|---|---|---|---|"]
    for o in OPTIONS:
        var = "—"
        if o.setting:
            own = _shown(o.inventory_default)
            var = f"`{o.variable}`" + ("" if own == _shown(o.default) else f" (`{own}`)")
        allowed = "" if o.kind in ("text", "url", "command") else rule_text(o)
        flag = f"`{o.flag}`" if o.kind == "flag" else f"`{o.flag} {metavar(o)}`"
        rows.append(f"| {flag} | {var} | {_default_text(o)} | {allowed} | {o.phase} | "
                    f"{o.help.replace('%%', '%').replace('|', '/')} |")
    return "\n".join(rows)

