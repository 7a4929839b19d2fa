"""Accessors over one result document (pure, no I/O): who measured it, which variant, what it
recorded. A missing figure is ``None``; every other part of the report reads results through
these."""

from __future__ import annotations

from typing import Any, Iterable

from ...measure.figures import COMBINED, MEAN_ACCEPTANCE_LENGTH, SINGLE_DECODE
from ...values import dig

CONCURRENCIES: tuple[int, ...] = (2, 4, 8)
QUALITY_IDS: tuple[str, ...] = ("capital_50", "free_text", "code", "arithmetic")
#: launch flags that say where a server listens, not how it serves (left out when pairing variants)
_ADDRESS_FLAGS = ("host", "port")


def num(value: Any) -> float | None:
    """``value`` as a float when it is a real number (bools and strings are not), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value:  # NaN
        return None
    return float(value)


def host_of(result: dict) -> str:
    """The host name of a result (``host`` key; ``"?"`` when absent)."""
    return str(result.get("host") or "?")


def variant_of(result: dict) -> dict:
    """The ``variant`` object of a result (a bare string is taken as the name)."""
    v = result.get("variant")
    if isinstance(v, str):
        return {"name": v}
    return v if isinstance(v, dict) else {}


def variant_name(result: dict) -> str:
    """The variant name (``variant.name``; ``"?"`` when absent)."""
    return str(variant_of(result).get("name") or "?")


def build_of(result: dict) -> str | None:
    """The variant's build (e.g. ``nvidia``), None when absent."""
    return variant_of(result).get("build")


def config_of(result: dict) -> str | None:
    """The variant's configuration (e.g. ``bare``, ``mtp2``), None when absent."""
    return variant_of(result).get("config")


def model_of(result: dict) -> str | None:
    """The served model id: ``variant.model``, else ``server.model``, else ``manifest.model``."""
    return variant_of(result).get("model") or dig(result, "server", "model") or dig(result, "manifest", "model")


def model_key(result: dict) -> str | None:
    """The model without its organisation (``nvidia/Qwen3.6-35B-A3B-NVFP4`` → ``Qwen3.6-35B-A3B-NVFP4``):
    builds of the same model from different publishers share it, so head-to-head pairs them."""
    model = model_of(result)
    return model.rsplit("/", 1)[-1] if model else None


def is_simulated(result: dict) -> bool:
    """True when the figures come from the simulator (top-level or manifest ``simulated``)."""
    return bool(result.get("simulated") or dig(result, "manifest", "simulated"))


def is_measured(result: dict) -> bool:
    """True when the result has figures (status complete or incomplete, not failed)."""
    return result.get("status") in ("complete", "incomplete")


def is_bare(result: dict) -> bool:
    """True for a configuration without speculative decoding (``config == "bare"``)."""
    return config_of(result) == "bare"


def is_speculative(result: dict) -> bool:
    """True when the variant drafts tokens: spec-decode figures recorded, a ``--speculative-config``
    launch flag, or a configuration named ``mtp…``/``spec…``/``eagle…``/``draft…``."""
    if acceptance(result) or MEAN_ACCEPTANCE_LENGTH.read(result) is not None:
        return True
    if launch_arg(result, "--speculative-config") is not None:
        return True
    cfg = (config_of(result) or "").lower()
    return cfg.startswith(("mtp", "spec", "eagle", "draft"))


def cluster_of(result: dict) -> dict | None:
    """The result's ``cluster`` block (a variant served across several hosts, Ray;
    ``sparkbench.cluster.cluster_block``), None for a one-unit result."""
    c = result.get("cluster") if isinstance(result, dict) else None
    return c if isinstance(c, dict) else None


def is_cluster(result: dict) -> bool:
    """True when the result was measured on a cluster (it has a ``cluster`` block): one unit made
    of several hosts, written under the head host; never a peer of a one-Spark host."""
    return cluster_of(result) is not None


def cluster_members(result: dict) -> list[str]:
    """The cluster's hosts, head first: ``cluster.members``, else the nodes' hosts, else the head."""
    c = cluster_of(result) or {}
    members = c.get("members")
    if isinstance(members, list) and members:
        return [str(m) for m in members]
    nodes = [str(x.get("host")) for x in c.get("nodes") or [] if isinstance(x, dict) and x.get("host")]
    return nodes or [str(c.get("head") or host_of(result))]


def unit_of(result: dict) -> str:
    """The unit that produced the figures, as the tables show it: the host, or for a cluster
    ``"<name> (<head> + <worker>)"``, e.g. ``sim_pair (spark-sim11 + spark-sim12)``."""
    c = cluster_of(result)
    if c is None:
        return host_of(result)
    return f"{c.get('name') or 'cluster'} ({' + '.join(cluster_members(result))})"


def unit_fields(result: dict) -> dict:
    """``{"unit": unit_of(result)}`` for a cluster result, {} otherwise (rows of one-unit results
    have no ``unit`` key)."""
    return {"unit": unit_of(result)} if is_cluster(result) else {}


def _int_arg(result: dict, *flags: str) -> int | None:
    """The first of ``flags`` given at launch, as an integer (None when absent or not a number)."""
    for flag in flags:
        value = launch_arg(result, flag)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return None
    return None


def parallel_sizes(result: dict) -> tuple[int, int]:
    """(tensor parallel size, pipeline parallel size): the ``cluster`` block's
    ``tensor_parallel_size`` / ``pipeline_parallel_size``, else the launch flags
    ``--tensor-parallel-size`` / ``-tp`` and ``--pipeline-parallel-size`` / ``-pp``; 1 when unset."""
    c = cluster_of(result) or {}
    tp = num(c.get("tensor_parallel_size"))
    pp = num(c.get("pipeline_parallel_size"))
    tp_i = int(tp) if tp is not None else _int_arg(result, "--tensor-parallel-size", "-tp")
    pp_i = int(pp) if pp is not None else _int_arg(result, "--pipeline-parallel-size", "-pp")
    return (tp_i or 1, pp_i or 1)


def parallel_label(result: dict) -> str | None:
    """``TP=2``, ``PP=2``, ``TP=2 × PP=2``; None when neither is above 1."""
    tp, pp = parallel_sizes(result)
    parts = ([f"TP={tp}"] if tp > 1 else []) + ([f"PP={pp}"] if pp > 1 else [])
    return " × ".join(parts) or None


def matrix_position(result: dict) -> tuple[float, str, str]:
    """Sort key of the matrix order: ``variant.index``, else ``started_at``, then the name."""
    index = num(variant_of(result).get("index"))
    return (index if index is not None else float("inf"), str(result.get("started_at") or "~"),
            variant_name(result))


def sort_results(results: Iterable[dict]) -> list[dict]:
    """Results in report order: by host, then in matrix order (:func:`matrix_position`)."""
    return sorted(results, key=lambda r: (host_of(r), matrix_position(r)))


def build_order(results: Iterable[dict]) -> list[str]:
    """Builds in the order the matrix lists them (the earliest :func:`matrix_position` of any of
    their results, then the name); the first one is the reference build of every comparison."""
    first: dict[str, tuple] = {}
    for r in results:
        b = build_of(r)
        if b is None:
            continue
        pos = matrix_position(r)[:2]
        if b not in first or pos < first[b]:
            first[b] = pos
    return sorted(first, key=lambda b: (first[b], b))


def single_stats(result: dict) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) single-stream decode tok/s; Nones when not measured."""
    return SINGLE_DECODE.spread(result) if is_measured(result) else (None, None, None)


def combined_at(result: dict, concurrency: int) -> float | None:
    """Combined tok/s (all streams' completion tokens / wall time) at ``concurrency`` parallel."""
    return COMBINED.read(result, concurrency) if is_measured(result) else None


def acceptance(result: dict) -> list[float]:
    """MTP acceptance rate per draft position (unconditional rates, position 1 first); [] for bare."""
    rates = dig(result, "spec_decode", "acceptance_per_position") or []
    return [float(x) for x in rates if num(x) is not None]


def mean_acceptance_length(result: dict) -> float | None:
    """Tokens per verify step = ``spec_decode.mean_acceptance_length``, else 1 + Σ per-position rates."""
    value = MEAN_ACCEPTANCE_LENGTH.read(result)
    if value is not None:
        return value
    rates = acceptance(result)
    return 1.0 + sum(rates) if rates else None


def _argv(result: dict) -> list[str]:
    """The launch argv as recorded: ``launch.argv``, else ``variant.args`` as a list, else the
    ``launch_command`` split on spaces."""
    for value in (dig(result, "launch", "argv"), variant_of(result).get("args")):
        if isinstance(value, list):
            return [str(a) for a in value]
    cmd = result.get("launch_command")
    return cmd.split() if isinstance(cmd, str) else []


def launch_arg(result: dict, flag: str) -> str | None:
    """The value of launch flag ``flag`` (``--kv-cache-dtype``): from ``variant.args`` as a mapping
    (flag name without dashes → value), else from the recorded argv or command line."""
    args = variant_of(result).get("args")
    if isinstance(args, dict):
        wanted = flag.lstrip("-").replace("_", "-")
        for key, value in args.items():
            if str(key).lstrip("-").replace("_", "-") == wanted and value is not None and value is not False:
                return value if isinstance(value, str) else str(value)
    tokens = _argv(result)
    for i, tok in enumerate(tokens):
        if tok == flag and i + 1 < len(tokens):
            return tokens[i + 1]
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


def launch_flags(result: dict) -> dict[str, Any]:
    """The launch flags as ``{name without dashes: value}``: ``variant.args`` when it is a mapping
    (``false`` kept: it is what launches ``--no-<flag>``), else the recorded argv (``--no-x`` → x:
    False, ``--x`` alone → True, ``--x v`` → "v"); the address flags (host, port) left out."""
    args = variant_of(result).get("args")
    out: dict[str, Any] = {}
    if isinstance(args, dict):
        for key, value in args.items():
            out[str(key).lstrip("-").replace("_", "-")] = value
    else:
        tokens = _argv(result)
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith("--"):
                name, eq, val = tok[2:].partition("=")
                if eq:
                    out[name] = val
                elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    out[name] = tokens[i + 1]
                    i += 1
                elif name.startswith("no-"):
                    out[name[3:]] = False
                else:
                    out[name] = True
            i += 1
    for flag in _ADDRESS_FLAGS:
        out.pop(flag, None)
    return out
