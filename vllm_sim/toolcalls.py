"""Tool calls: what the simulated model calls, decided from the request (never a stored answer),
written in the model's native format and read back by the server's ``--tool-call-parser``.

The reader is small and deterministic: it splits the last user message into clauses (at "and",
";", ". "), picks the offered tools whose name words appear in a clause (a clause naming none
continues the previous clause's tool when it brings arguments of its own), and fills arguments
from that clause's text: enum values mentioned (in order), numbers (in order), the capitalised
place after in/for/to/from/at (in order); a required argument the text does not give gets a
schema-valid default (the first enum value, the minimum or 1, "unknown").

Formats (model profile ``tool_call_format``): ``hermes`` (JSON inside ``<tool_call>``), ``qwen3_xml``
(``<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>``) and ``harmony``
(gpt-oss). A parser that reads the format turns the text into ``tool_calls``; any other parser
leaves the raw text in ``content`` and no ``tool_calls`` (vLLM's behaviour: the parser's start
token is missing, or parsing throws, and it returns the model output as content). ``required`` and
named tool choice use structured outputs: the calls are schema-valid whatever the parser.
"""
from __future__ import annotations

import json
import re
import secrets

# vLLM 0.32's registered tool parsers (vllm/tool_parsers/__init__.py).
TOOL_PARSERS = ("dots", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "deepseek_v41",
                "cohere_command3", "cohere_command4", "ernie45", "glm45", "glm47", "ling3", "granite-20b-fc",
                "granite", "granite4", "hermes", "hf", "poolside_v1", "hunyuan_a13b", "hy_v3", "hy_v4", "internlm",
                "jamba", "lfm2", "kimi_k2", "kimi_k3", "k2_horizon", "llama3_json", "llama4_json",
                "llama4_pythonic", "longcat", "mimo", "minimax_m2", "minimax_m3", "minicpm5", "mistral", "olmo3",
                "plamo3", "muse_glimmer", "openai", "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_json",
                "qwen3_xml", "seed_oss", "step3", "step3p5", "inkling", "xlam", "gigachat3", "functiongemma",
                "gemma4", "apertus")
# Which parsers read which native format.
FORMAT_PARSERS = {"hermes": {"hermes", "qwen3_json"}, "qwen3_xml": {"qwen3_xml", "qwen3_coder"},
                  "harmony": {"openai"}}
FORMATS = tuple(FORMAT_PARSERS)
DEFAULT_FORMAT = "hermes"

AUTO_NEEDS_FLAGS = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'

_GENERIC = {"get", "set", "search", "find", "make", "do", "run", "call", "tool", "the", "a", "for", "to", "of"}
_CLAUSE_RE = re.compile(r"\s*(?:,?\s+and\s+|;|\.\s+|,\s*then\s+)\s*", re.I)
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*[A-Za-z])")
_PLACE_RE = re.compile(r"\b(?:in|for|to|from|at)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")


def tool_call_id() -> str:
    """``chatcmpl-tool-<hex>``, as vLLM's make_tool_call_id."""
    return "chatcmpl-tool-" + secrets.token_hex(8)


def _functions(tools) -> list[dict]:
    out = []
    for t in tools or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def _keywords(fn: dict) -> list[str]:
    words = [w for w in re.split(r"[_\W]+", fn["name"].lower()) if len(w) >= 3 and w not in _GENERIC]
    return [w[:-1] if w.endswith("s") and len(w) > 4 else w for w in words]


def _mentions(fn: dict, text: str) -> int | None:
    """Position of the first name word of ``fn`` in ``text`` (a word prefix), or None."""
    best = None
    for kw in _keywords(fn):
        m = re.search(r"\b" + re.escape(kw), text, re.I)
        if m and (best is None or m.start() < best):
            best = m.start()
    return best


def _default(schema: dict):
    if schema.get("enum"):
        return schema["enum"][0]
    t = schema.get("type")
    if t == "integer":
        return int(schema.get("minimum", 1))
    if t == "number":
        return schema.get("minimum", 1)
    if t == "boolean":
        return False
    if t == "array":
        return []
    if t == "object":
        return {}
    return "unknown"


def fill_arguments(fn: dict, text: str, fallback: str = "", defaults: bool = True) -> dict:
    """Arguments for ``fn`` read from ``text`` (then ``fallback`` for required ones), in schema order."""
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])

    def material(src: str) -> dict:
        low = src.lower()
        enums: dict[tuple, list] = {}
        for k, sch in props.items():
            if sch.get("enum"):
                key = tuple(map(str, sch["enum"]))
                if key not in enums:
                    found = []
                    for v in sch["enum"]:
                        for m in re.finditer(r"\b" + re.escape(str(v).lower()) + r"\b", low):
                            found.append((m.start(), v))
                    enums[key] = [v for _, v in sorted(found, key=lambda x: x[0])]
        return {"enums": enums, "numbers": [m.group(0) for m in _NUMBER_RE.finditer(src)],
                "places": [m.group(1) for m in _PLACE_RE.finditer(src)]}

    def take(mat: dict, sch: dict):
        if sch.get("enum"):
            lst = mat["enums"].get(tuple(map(str, sch["enum"])))
            return lst.pop(0) if lst else None
        t = sch.get("type")
        if t in ("integer", "number"):
            if not mat["numbers"]:
                return None
            n = mat["numbers"].pop(0)
            v = float(n)
            return int(v) if t == "integer" or v.is_integer() else v
        if t == "string":
            return mat["places"].pop(0) if mat["places"] else None
        return None

    mine, spare = material(text), material(fallback) if fallback else None
    args: dict = {}
    for k, sch in props.items():
        v = take(mine, sch)
        if v is None and k in required and spare is not None:
            v = take(spare, sch)
        if v is None and k in required and defaults:
            v = _default(sch)
        if v is not None:
            args[k] = v
    return args


def decide(text: str, tools, tool_choice) -> list[tuple[str, dict]]:
    """The calls the simulated model makes for the last user message ``text``: [(name, args)]."""
    fns = _functions(tools)
    if not fns or tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        fn = next((f for f in fns if f["name"] == name), None)
        return [(fn["name"], fill_arguments(fn, text))] if fn else []
    calls: list[tuple[str, dict]] = []
    prev: dict | None = None
    for clause in [c for c in _CLAUSE_RE.split(text) if c.strip()]:
        hits = sorted((pos, i) for i, f in enumerate(fns) if (pos := _mentions(f, clause)) is not None)
        chosen = [fns[i] for _, i in hits]
        if not chosen and prev is not None and fill_arguments(prev, clause, defaults=False):
            chosen = [prev]
        for fn in chosen:
            calls.append((fn["name"], fill_arguments(fn, clause, fallback=text)))
        if chosen:
            prev = chosen[-1]
    if not calls and tool_choice == "required":
        calls = [(fns[0]["name"], fill_arguments(fns[0], text))]
    return calls


# --- native formats --------------------------------------------------------------------------

def render(calls: list[tuple[str, dict]], fmt: str | None) -> str:
    """The model's raw text for ``calls`` in format ``fmt`` (hermes when None)."""
    fmt = fmt or DEFAULT_FORMAT
    parts = []
    for name, args in calls:
        if fmt == "qwen3_xml":
            ps = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                         for k, v in args.items())
            parts.append(f"<tool_call>\n<function={name}>\n{ps}</function>\n</tool_call>")
        elif fmt == "harmony":
            parts.append(f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
                         f"{json.dumps(args, ensure_ascii=False)}<|call|>")
        else:
            parts.append("<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
                         + "\n</tool_call>")
    return "\n".join(parts)


def _typed(value: str, schema: dict):
    """A qwen3_xml parameter's text converted by the tool's schema type (as vLLM's parser does)."""
    t = (schema or {}).get("type")
    if t in (None, "string"):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse(text: str, fmt: str | None, parser: str | None, tools) -> tuple[str | None, list[tuple[str, dict]]] | None:
    """Parse the model's ``text`` with ``parser`` (None: the structured-output tag of required/named
    tool choice, read whatever the parser); (content before the calls or None, calls), or None when
    the parser does not read this format or the text does not parse (raw text stays content)."""
    fmt = fmt or DEFAULT_FORMAT
    if parser is not None and parser not in FORMAT_PARSERS.get(fmt, ()):
        return None
    schemas = {f["name"]: (f.get("parameters") or {}).get("properties") or {} for f in _functions(tools)}
    calls: list[tuple[str, dict]] = []
    try:
        if fmt == "hermes":
            start = text.find("<tool_call>")
            if start < 0:
                return None
            blocks = re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.S)
            for closed, open_ in blocks:
                obj = json.loads(closed or open_)
                calls.append((obj["name"], obj.get("arguments") or {}))
        elif fmt == "qwen3_xml":
            start = text.find("<tool_call>")
            if start < 0:
                return None
            for name, body in re.findall(r"<function=([^>\n]+)>\n?(.*?)</function>", text, re.S):
                props = schemas.get(name, {})
                args = {k: _typed(v.strip("\n"), props.get(k, {}))
                        for k, v in re.findall(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", body, re.S)}
                calls.append((name, args))
            if not calls:
                return None
        else:  # harmony
            start = text.find("<|channel|>")
            found = re.findall(r"to=functions\.([\w.-]+).*?<\|message\|>(.*?)<\|call\|>", text, re.S)
            if start < 0 or not found:
                return None
            calls = [(n, json.loads(a)) for n, a in found]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if any(not isinstance(a, dict) for _, a in calls):
        return None
    content = text[:start].strip() or None
    return content, calls


def message_calls(calls: list[tuple[str, dict]]) -> list[dict]:
    """``tool_calls`` entries as vLLM returns them (arguments a JSON string)."""
    return [{"id": tool_call_id(), "type": "function",
             "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)}} for n, a in calls]


def finish_reason(reason: str, called: bool, tool_choice) -> str:
    """vLLM's resolve_finish_reason: "tool_calls" when calls were made, the engine stopped by
    itself and the tool choice was not a named function; otherwise the engine's reason."""
    if called and reason == "stop" and not isinstance(tool_choice, dict):
        return "tool_calls"
    return reason


def parser_format(parser: str | None) -> str:
    """The native format a parser reads (the structural tag required/named decode in); hermes
    for a parser whose format the simulator does not write."""
    for fmt, parsers in FORMAT_PARSERS.items():
        if parser in parsers:
            return fmt
    return DEFAULT_FORMAT
