"""The one secret rule: which names hold secrets, and how a secret is shown.

Used by the launch spec (container environment, recorded command line, configuration hash),
the result document and the runner (extra variables, runner artifacts). A name holds a secret
when one of its ``_``-separated words at the end is token, password, passwd, credential(s) or
api key, or any word is ``secret``: ``HF_TOKEN``, ``VLLM_API_KEY``, ``vault_hf_token``,
``AWS_SECRET_ACCESS_KEY`` — but not ``llm_bench_output_tokens`` (a count) or ``max_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .launch import EnvValues

REDACTED = "<redacted>"
SECRET_NAME_RE = re.compile(r"(?i)((^|_)(token|password|passwd|credentials?|api_?key)$|(^|_)secret(_|$))")
#: vLLM flags whose value is a secret.
SECRET_FLAGS = frozenset({"api-key"})


def is_secret_name(name: Any) -> bool:
    """True when a variable or environment name holds a secret (see the module docstring)."""
    return bool(SECRET_NAME_RE.search(str(name)))


def public_env(env: EnvValues | None) -> dict[str, str]:
    """The environment without its secret entries (what a result file may carry)."""
    return {str(k): str(v) for k, v in (env or {}).items() if not is_secret_name(k)}


def redacted_env(env: EnvValues | None) -> dict[str, str]:
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


_HF_TOKEN_VALUE = re.compile(r"\bhf_[A-Za-z0-9]{8,}")
_NAME_VALUE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_FLAG_VALUE = re.compile(r"--([A-Za-z0-9][A-Za-z0-9_-]*)([ =])(\S+)")
#: ``'api_key': ['x']`` / ``"hf_token": "x"``: a dict or list repr, as vLLM's ``non-default args`` line prints it.
_KEY_VALUE = re.compile(r"""(['"])([A-Za-z_][A-Za-z0-9_]*)\1(\s*:\s*)(\[[^\]]*\]|'[^']*'|"[^"]*"|[^,}\s]+)""")


def redact_text(text: str, values: Iterable[str] = ()) -> str:
    """Free text (a server log line) with secrets replaced by ``<redacted>``: every value in
    ``values`` (:func:`scrub_text`), anything shaped like a Hugging Face token (``hf_…``), and the
    value of a secret name written ``NAME=value``, ``--flag value`` / ``--flag=value``, or
    ``'name': value`` (the dict repr of vLLM's ``non-default args`` line: ``'api_key': ['sk-…']``)."""
    out = _HF_TOKEN_VALUE.sub(REDACTED, scrub_text(str(text), values))
    out = _NAME_VALUE.sub(lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0), out)

    def flag(m: re.Match) -> str:
        name = m.group(1)
        secret = name in SECRET_FLAGS or is_secret_name(name.replace("-", "_"))
        return f"--{name}{m.group(2)}{REDACTED}" if secret else m.group(0)

    out = _FLAG_VALUE.sub(flag, out)
    return _KEY_VALUE.sub(lambda m: (f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}'{REDACTED}'"
                                     if is_secret_name(m.group(2)) else m.group(0)), out)
