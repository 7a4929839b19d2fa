"""PNG decoding (zlib + the five PNG row filters) and colour naming for the image question.

The simulator answers the image question by looking at the pixels, never from a lookup.
"""
from __future__ import annotations

import colorsys
import struct
import zlib
from collections import Counter


class PNGError(ValueError):
    """Not a PNG the decoder handles (8-bit greyscale, RGB, RGBA, grey+alpha or palette)."""


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode a PNG to ``(width, height, [(r, g, b), ...])`` in row-major order."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise PNGError("not a PNG file")
    pos, idat, plte = 8, [], None
    width = height = depth = ctype = None
    while pos + 8 <= len(data):
        length, ctag = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if ctag == b"IHDR":
            width, height, depth, ctype, _comp, _filt, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or interlace:
                raise PNGError("only 8-bit, non-interlaced PNGs are supported")
        elif ctag == b"PLTE":
            plte = [tuple(body[i:i + 3]) for i in range(0, len(body), 3)]
        elif ctag == b"IDAT":
            idat.append(body)
        elif ctag == b"IEND":
            break
    if width is None:
        raise PNGError("PNG has no IHDR chunk")
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if channels is None:
        raise PNGError(f"unsupported PNG colour type {ctype}")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    i = 0
    for _ in range(height):
        ftype = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                line[x] = (line[x] + _paeth(a, b, c)) & 0xFF
            elif ftype != 0:
                raise PNGError(f"bad PNG filter type {ftype}")
        prev = line
        for x in range(0, stride, channels):
            if ctype in (0, 4):
                g = line[x]
                pixels.append((g, g, g))
            elif ctype == 3:
                if plte is None:
                    raise PNGError("palette PNG without PLTE")
                pixels.append(plte[line[x]])
            else:
                pixels.append((line[x], line[x + 1], line[x + 2]))
    return width, height, pixels


def colour_name(rgb: tuple[int, int, int]) -> str:
    """Name a colour by hue/saturation/value (basic English colour words)."""
    r, g, b = (v / 255.0 for v in rgb)
    h, s, v = colorsys.rgb_to_hsv(r, g, b)
    if v < 0.2:
        return "black"
    if s < 0.2:
        return "white" if v > 0.85 else "gray"
    deg = h * 360.0
    if deg < 15 or deg >= 335:
        return "pink" if s < 0.5 and v > 0.8 else "red"
    if deg < 40:
        return "brown" if v < 0.6 else "orange"
    if deg < 70:
        return "yellow"
    if deg < 170:
        return "green"
    if deg < 200:
        return "cyan"
    if deg < 260:
        return "blue"
    if deg < 300:
        return "purple"
    return "magenta"


def dominant_colour(data: bytes) -> str:
    """Name the most frequent colour that differs from the background (the border's commonest)."""
    w, h, px = decode_png(data)
    border = [px[x] for x in range(w)] + [px[(h - 1) * w + x] for x in range(w)]
    border += [px[y * w] for y in range(h)] + [px[y * w + w - 1] for y in range(h)]
    bg = Counter(border).most_common(1)[0][0]
    fg = Counter(p for p in px if sum(abs(p[i] - bg[i]) for i in range(3)) > 60)
    if not fg:
        return colour_name(bg)
    return colour_name(fg.most_common(1)[0][0])
