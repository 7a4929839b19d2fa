"""The image check (--image): a PNG made in-process (a shape in a colour drawn per run), the
question of the quality file's ``image`` section, pass when the answer names that colour only."""
from __future__ import annotations

import base64
import random
from typing import TYPE_CHECKING

from ..common import log
from ..quality import ImageEntry, final_answer, make_png, names_colour
from ..shapes import ChatMessage

if TYPE_CHECKING:
    from ..session import Session


def run(s: Session) -> None:
    img = (s.quality_data or {}).get("image") or {}
    palette = list(img["colours"].keys())
    seed = s.rng.randrange(1 << 31)
    pick = random.Random(seed)
    colour = pick.choice(palette)
    shape = pick.choice(["square", "circle", "triangle"])
    w, h = (img.get("size") or [64, 64])[:2]
    png = make_png(int(w), int(h), img.get("background") or [255, 255, 255], img["colours"][colour], shape)
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    msgs: list[ChatMessage] = [{"role": "user", "content": [
        {"type": "text", "text": img.get("prompt", "What colour is the shape?")},
        {"type": "image_url", "image_url": {"url": url}}]}]
    with s.phase("image") as span:
        r = s.generate("image", [msgs], s.args.quality_max_tokens, False)[0].stream
        assert r is not None
        span.tokens = r.completion_tokens or 0
    answer = final_answer(r)
    entry: ImageEntry = {"status": "error", "answer": answer, "expected": colour, "shape": shape, "seed": seed,
                         "named": [], "finish_reason": r.finish_reason, "reasoning_tokens": r.reasoning_tokens,
                         "completion_tokens": r.completion_tokens, "spec_decode_active": None}
    before, after = s.spec_phases["image"]
    if before is not None and after is not None:
        entry["spec_decode_active"] = after.drafts > before.drafts
    if r.error:
        entry["error"] = r.error
        s.error("image", 0, r.error)
    elif r.finish_reason == "length" and not answer:
        entry["status"] = "truncated"
    else:
        ok, named = names_colour(answer, colour, palette)
        entry["named"] = named
        entry["status"] = "pass" if ok else "fail"
    s.doc["image"] = entry
    log(f"image: {entry['status']} (expected {colour}, answer {answer[:40]!r})")
