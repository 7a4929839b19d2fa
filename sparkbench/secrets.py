"""The one secret rule: which names hold secrets, and how a secret is shown.

Used by the launch spec (container environment, recorded command line, configuration hash),
the result document and the runner (extra variables, runner artifacts). A name holds a secret
when one of its ``_``-separated words at the end is token, password, passwd, credential(s) or
api key, or any word is ``secret``: ``HF_TOKEN``, ``VLLM_API_KEY``, ``vault_hf_token``,
``AWS_SECRET_ACCESS_KEY`` — but not ``llm_bench_output_tokens`` (a count) or ``max_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
SECRET_NAME_RE = re.compile(r"(?i)((^|_)(token|password|passwd|credentials?|api_?key)$|(^|_)secret(_|$))")
#: vLLM flags whose value is a secret.
SECRET_FLAGS = frozenset({"api-key"})


def is_secret_name(name: Any) -> bool:
    """True when a variable or environment name holds a secret (see the module docstring)."""
    return bool(SECRET_NAME_RE.search(str(name)))


def public_env(env: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment without its secret entries (what a result file may carry)."""
    return {str(k): str(v) for k, v in (env or {}).items() if not is_secret_name(k)}


def redacted_env(env: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment with secret values replaced by ``<redacted>`` (names kept)."""
    return {str(k): (REDACTED if is_secret_name(k) else str(v)) for k, v in (env or {}).items()}


def redact_argv(argv: Sequence[Any]) -> list[str]:
    """Values of secret flags (``--api-key X``, ``--api-key=X``) replaced by ``<redacted>``."""
    out: list[str] = []
    hide_next = False
    for item in (str(a) for a in argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag = item[2:] if item.startswith("--") else None
        if flag is not None and "=" in flag and flag.split("=", 1)[0] in SECRET_FLAGS:
            out.append(f"--{flag.split('=', 1)[0]}={REDACTED}")
        else:
            out.append(item)
            hide_next = flag in SECRET_FLAGS
    return out


def scrub_text(text: str, values: Iterable[str]) -> str:
    """``text`` with every secret value in ``values`` (non-empty ones) replaced by ``<redacted>``."""
    for value in values:
        if value:
            text = text.replace(value, REDACTED)
    return text
