"""The header of a safetensors file: every tensor's name, dtype and shape, never its data.

The format (huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned 64-bit integer
``N``; then ``N`` bytes of UTF-8 JSON mapping each tensor name to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets relative to the byte after the header), plus an optional
``"__metadata__"`` of string pairs. A reader needs the first ``8 + N`` bytes only, which is what
makes a profile from the Hub cost a few kilobytes per shard (an HTTP range request) instead of the
weights.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable

#: Bytes per element of each safetensors dtype (safetensors' ``Dtype`` enum). The 4-bit and 6-bit
#: float types pack several elements per byte: their size is a fraction.
DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}

#: The format's own bound on the header (safetensors rejects larger ones: "HeaderTooLarge").
MAX_HEADER_BYTES = 100_000_000


class HeaderError(ValueError):
    """A file that is not a safetensors file, or whose header contradicts itself."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as its file's header declares it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def header_length(first8: bytes, source: str = "file") -> int:
    """``N`` from a file's first 8 bytes, checked against the format's bound."""
    if len(first8) < 8:
        raise HeaderError(f"{source}: {len(first8)} bytes, shorter than a safetensors header's 8-byte length")
    (n,) = struct.unpack("<Q", first8[:8])
    if n == 0 or n > MAX_HEADER_BYTES:
        raise HeaderError(f"{source}: header length {n} is outside 1..{MAX_HEADER_BYTES}: not a safetensors file")
    return n


def parse_header(raw: bytes, source: str = "file") -> tuple[list[Tensor], dict[str, str]]:
    """The tensors and the ``__metadata__`` of a header's JSON bytes (without the 8-byte length)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(f"{source}: the header is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise HeaderError(f"{source}: the header is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    tensors = [_tensor(name, info, source) for name, info in doc.items()]
    return tensors, dict(meta)


def _tensor(name: str, info: object, source: str) -> Tensor:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise HeaderError(f"{source}: tensor {name!r} lacks dtype, shape or data_offsets")
    dtype, shape, (begin, end) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise HeaderError(f"{source}: tensor {name!r} has dtype {dtype!r}, not one of {sorted(DTYPE_BYTES)}")
    nbytes = int(end) - int(begin)
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if nbytes != math.ceil(expected):
        raise HeaderError(f"{source}: tensor {name!r} ({dtype} {list(shape)}) spans {nbytes} bytes, "
                          f"its shape needs {expected:g}")
    return Tensor(name, dtype, shape, nbytes)


def read_header(read_range: Callable[[int, int], bytes], source: str = "file") -> tuple[list[Tensor], dict[str, str]]:
    """Read a header through ``read_range(start, length) -> bytes`` (a local file or an HTTP range
    request): two reads, the 8-byte length and then the JSON."""
    n = header_length(read_range(0, 8), source)
    raw = read_range(8, n)
    if len(raw) != n:
        raise HeaderError(f"{source}: the header declares {n} bytes, {len(raw)} could be read")
    return parse_header(raw, source)


def read_file_header(fh: BinaryIO, source: str = "file") -> tuple[list[Tensor], dict[str, str]]:
    """The header of an open binary file (only its first ``8 + N`` bytes are read)."""

    def read_range(start: int, length: int) -> bytes:
        fh.seek(start)
        return fh.read(length)

    return read_header(read_range, source)
