"""report.html in headless Chromium (Debian's package, installed by scripts/setup_chromium.sh):
every chart image loaded (natural width > 0, written into the DOM by the page's own script and
read back with --dump-dom) and a screenshot that is not blank."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from helpers import REPO

RUNS = REPO / "tests" / "fixtures" / "runs"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--virtual-time-budget=5000"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="chromium missing: run scripts/setup_chromium.sh (make setup does)")
pytestmark = [pytestmark, pytest.mark.sim]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=90)


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into rows of raw pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("html") / "fleet-sim"
    shutil.copytree(RUNS / "fleet-sim", dest)
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(dest), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dest / "report.html"


def test_every_chart_loads(report: Path, tmp_path: Path):
    proc = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'id="chart-check"[^>]*data-charts-loaded="(\d+)"[^>]*data-natural-widths="([\d,]*)"', proc.stdout)
    assert m, "the page's load script did not run: " + proc.stdout[-500:]
    loaded, widths = int(m.group(1)), [int(w) for w in m.group(2).split(",")]
    assert loaded == 4 and len(widths) == 4 and all(w > 0 for w in widths)
    assert "4 of 4 charts loaded" in proc.stdout


def test_screenshot_not_blank(report: Path, tmp_path: Path):
    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, "--window-size=1200,1600", f"--screenshot={shot}", report.as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1200, 1600)
    colours = set()
    non_white = 0
    for row in rows[::8]:
        bpp = len(row) // width
        for x in range(0, width, 8):
            px = row[x * bpp:x * bpp + 3]
            colours.add(px)
            non_white += px != b"\xff\xff\xff"
    assert non_white > 500, "screenshot is (almost) blank"
    assert len(colours) > 20  # text, table borders, the banner, chart colours
