"""The quality checks and the image check: the quality file, each question's judge, the PNG made
in-process and whether an answer names its colour."""
from __future__ import annotations

import re
import struct
import unicodedata
import zlib
from typing import Literal, TypedDict

from .profiles import data_file, read_json
from .sandbox import Sandbox, SandboxInfo
from .shapes import JSON
from .sse import StreamResult

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_CODE = re.compile(r"```[ \t]*(?:python3?|py)[^\n]*\n(.*?)```", re.S | re.I)


# ---- the quality file (--quality-file; sparkbench/data/prompts/quality.json) ----------------------
class QualityCheck(TypedDict, total=False):
    """How one question is judged: ``type`` and that type's fields (the quality file)."""

    type: str
    max_chars: int
    must_contain: list[str]
    min_japanese_ratio: float
    expected: JSON
    function: str
    asserts: list[str]


class _QuestionBase(TypedDict):
    id: str
    prompt: str


class QualityQuestion(_QuestionBase, total=False):
    """One question of the quality file: asked by ``phases.quality``, judged by ``check_quality``."""

    check: QualityCheck


class _ImageSpecBase(TypedDict):
    colours: dict[str, list[int]]


class ImageSpec(_ImageSpecBase, total=False):
    """The quality file's ``image`` section: the palette (name: RGB), the question, the PNG's size
    and background; read by ``phases.image``."""

    prompt: str
    size: list[int]
    background: list[int]


class _QualityFileBase(TypedDict):
    questions: list[QualityQuestion]


class QualityFile(_QualityFileBase, total=False):
    """The quality file as ``load_quality`` checked it (its other keys are notes)."""

    image: ImageSpec


# ---- the result's blocks ----------------------------------------------------------------------------
class _QualityDetailsBase(TypedDict):
    check: str | None


class QualityDetails(_QualityDetailsBase, total=False):
    """``quality[].details``: what the check of one question saw (its keys depend on the check
    type); ``check_quality``."""

    error: str
    reason: str
    chars: int
    max_chars: int
    missing: list[str]
    japanese_ratio: float
    min_japanese_ratio: float
    finished: bool
    expected: JSON
    found: float | None
    sandbox: SandboxInfo
    defines_function: bool
    asserts: int
    output_tail: str


class QualityEntry(TypedDict):
    """``quality[]``: one quality question; ``phases.quality``."""

    id: str
    status: Literal["pass", "fail", "truncated", "skipped", "error"]
    answer: str
    reasoning_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    details: QualityDetails


class _ImageBase(TypedDict):
    status: Literal["pass", "fail", "truncated", "error"]
    answer: str
    expected: str
    shape: str
    seed: int
    named: list[str]
    finish_reason: str | None
    reasoning_tokens: int | None
    completion_tokens: int | None
    spec_decode_active: bool | None


class ImageEntry(_ImageBase, total=False):
    """``image``: the image question; ``phases.image``."""

    error: str


def final_answer(res: StreamResult) -> str:
    """The answer with reasoning excluded: content minus any inline <think>...</think> block."""
    return _THINK.sub("", res.content).strip()


def japanese_ratio(text: str) -> float:
    """Share of non-whitespace characters in Japanese scripts (kana, CJK, CJK punctuation)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    jp = 0
    for c in chars:
        o = ord(c)
        if (0x3000 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
                or 0xFF00 <= o <= 0xFFEF or 0xF900 <= o <= 0xFAFF):
            jp += 1
    return jp / len(chars)


def last_number(text: str) -> float | None:
    """The last number in the text (full-width digits and thousands separators understood)."""
    norm = unicodedata.normalize("NFKC", text)
    norm = re.sub(r"(?<=\d),(?=\d{3})", "", norm)
    found = re.findall(r"-?\d+(?:\.\d+)?", norm)
    return float(found[-1]) if found else None



def check_quality(q: QualityQuestion, res: StreamResult, budget: int, sandbox: Sandbox | None
                  ) -> tuple[str, QualityDetails]:
    """Status (pass/fail/truncated/skipped/error) and details for one quality question."""
    check = q.get("check") or {}
    kind = check.get("type")
    answer = final_answer(res)
    details: QualityDetails = {"check": kind}
    if res.error:
        details["error"] = res.error
        return "error", details
    if res.finish_reason == "length" and not answer:
        details["reason"] = f"hit the {budget}-token budget before any answer content"
        return "truncated", details
    if kind == "max_chars_and_contains":
        limit = int(check.get("max_chars", 50))
        must = list(check.get("must_contain", []))
        details.update({"chars": len(answer), "max_chars": limit,
                        "missing": [m for m in must if m not in answer]})
        ok = len(answer) <= limit and not details["missing"]
        return ("pass" if ok else "fail"), details
    if kind == "japanese_text":
        ratio = japanese_ratio(answer)
        need = float(check.get("min_japanese_ratio", 0.5))
        details.update({"japanese_ratio": round(ratio, 4), "min_japanese_ratio": need,
                        "chars": len(answer), "finished": res.finish_reason != "length"})
        ok = bool(answer) and ratio >= need and res.finish_reason != "length"
        return ("pass" if ok else "fail"), details
    if kind == "final_number":
        expected = check.get("expected")
        got = last_number(answer)
        details.update({"expected": expected, "found": got})
        ok = got is not None and expected is not None and abs(got - float(expected)) < 1e-9
        return ("pass" if ok else "fail"), details
    if kind == "python_function":
        fn = check.get("function", "")
        m = _CODE.search(answer)
        details["sandbox"] = sandbox.describe() if sandbox else {"kind": "none", "protections": []}
        if not m:
            details["reason"] = "no ```python code block in the answer"
            return "fail", details
        code = m.group(1)
        details["defines_function"] = bool(re.search(rf"^\s*(async\s+)?def\s+{re.escape(fn)}\s*\(", code, re.M))
        if not details["defines_function"]:
            details["reason"] = f"the code block does not define {fn}()"
            return "fail", details
        if sandbox is None or sandbox.kind == "none":
            details["reason"] = "no sandbox available: the code was not run"
            return "skipped", details
        program = code + "\n\n" + "\n".join(check.get("asserts", [])) + "\nprint('SPARKBENCH_ASSERTS_OK')\n"
        ok, out = sandbox.run(program)
        passed = ok and "SPARKBENCH_ASSERTS_OK" in out
        details["asserts"] = len(check.get("asserts", []))
        if not passed:
            details["output_tail"] = out[-500:]
        return ("pass" if passed else "fail"), details
    details["reason"] = f"unknown check type {kind!r} in the quality file"
    return "error", details



def load_quality(path: str) -> QualityFile:
    """Read and sanity-check the quality file; raise ValueError with a one-line message."""
    data = read_json(path, "--quality-file")
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not all(isinstance(q, dict) and q.get("id") and q.get("prompt") for q in qs):
        raise ValueError(f"--quality-file: {path} needs a 'questions' list of objects with 'id' and 'prompt'")
    img = data.get("image")
    if img is not None and not (isinstance(img, dict) and isinstance(img.get("colours"), dict) and img["colours"]):
        raise ValueError(f"--quality-file: {path}: 'image' needs a non-empty 'colours' object")
    return data



def make_png(width: int, height: int, background: list[int], colour: list[int], shape: str) -> bytes:
    """An RGB PNG: a filled ``shape`` (square/circle/triangle) in ``colour`` on ``background``."""
    rows = []
    cx, cy = width / 2.0, height / 2.0
    r = min(width, height) * 0.3
    bg = bytes(background[:3])
    fg = bytes(colour[:3])
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            px, py = x + 0.5, y + 0.5
            if shape == "circle":
                inside = (px - cx) ** 2 + (py - cy) ** 2 <= r * r
            elif shape == "triangle":
                top, bottom = cy - r, cy + r
                inside = top <= py <= bottom and abs(px - cx) <= (py - top) / 2.0 * 1.15
            else:
                inside = abs(px - cx) <= r and abs(py - cy) <= r
            row += fg if inside else bg
        rows.append(bytes(row))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + chunk(b"IEND", b""))


def names_colour(answer: str, expected: str, palette: list[str]) -> tuple[bool, list[str]]:
    """Whole-word, case-insensitive: the expected colour is named and no other palette colour."""
    low = answer.lower()
    named = [c for c in palette if re.search(rf"\b{re.escape(c.lower())}\b", low)]
    return named == [expected], named



def default_quality_file() -> str:
    """measure.pyz's own quality.json, else the one beside the package, else sparkbench's own."""
    return data_file("quality.json")
