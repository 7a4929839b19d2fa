"""Loose values read one way everywhere: an inventory flag as a bool (``as_bool``), a value down a
path of keys in a document as it lies (``dig``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the strings an inventory flag reads as true, in any case (Ansible passes ``-e`` values as text)
TRUE_WORDS = ("1", "true", "yes", "on")


def as_bool(value: Any) -> bool:
    """An inventory flag (a bool, or "true"/"yes"/"on"/"1" in any case) as a bool."""
    if isinstance(value, str):
        return value.strip().lower() in TRUE_WORDS
    return bool(value)


def dig(doc: Any, *path: Any, default: Any = None) -> Any:
    """``doc[path[0]][path[1]]...`` (a mapping's key or a list's index at each step), or ``default``
    when any step is missing or null."""
    cur = doc
    for key in path:
        if isinstance(cur, Mapping):
            cur = cur.get(key)
        elif isinstance(cur, list) and isinstance(key, int) and -len(cur) <= key < len(cur):
            cur = cur[key]
        else:
            return default
        if cur is None:
            return default
    return cur
