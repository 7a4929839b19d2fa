"""Answer book and text generation: what the simulated model says, as a list of tokens.

Tokens are simulator tokens: one CJK character, one word (with its leading space), one
punctuation mark or one newline each. Prompt token counts use the same split plus a fixed chat
template overhead per message, and a vision-token estimate per image.
"""
from __future__ import annotations

import base64
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import pngdecode

_TOKEN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff00-\uffef\u3000-\u303f]|\n| ?[A-Za-z0-9_']+| ?[^\sA-Za-z0-9_'\u3040-\u30ff\u3400-\u9fff\uff00-\uffef\u3000-\u303f]| +")
TEMPLATE_TOKENS_PER_MESSAGE = 4
TEMPLATE_TOKENS_FIXED = 3


def tokenize(text: str) -> list[str]:
    """Split text into simulator tokens; ``"".join(tokenize(t)) == t``."""
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    """Number of simulator tokens in ``text``."""
    return len(_TOKEN_RE.findall(text))


def image_tokens(width: int, height: int) -> int:
    """Vision tokens for one image: one per 32x32 patch (28px patches merged 2x2), at least 4, plus 2."""
    return max(4, ((width + 31) // 32) * ((height + 31) // 32)) + 2


FILLER = [
    "Memory bandwidth sets the pace of decoding on a single accelerator.",
    "Each generated token requires reading the active weights once from memory.",
    "A mixture of experts model reads only the experts selected by its router.",
    "Speculative decoding proposes several tokens and verifies them in one pass.",
    "When the draft is accepted, the engine emits more than one token per step.",
    "Batching several requests amortizes the cost of reading the weights.",
    "The key value cache grows with the context and adds to every step.",
    "Quantized weights shrink the bytes read per token and raise the ceiling.",
    "A careful benchmark repeats each measurement and reports the median.",
    "Time to first token depends on the length of the prompt and the queue.",
    "Continuous batching admits new requests between decoding steps.",
    "The scheduler balances prefill work against the decoding of running requests.",
    "Reproducible results need pinned versions of the image and the weights.",
    "Throughput and latency trade against each other as concurrency grows.",
    "A roofline estimate divides the bandwidth by the bytes read per token.",
    "Thermal limits and background load can slow a long measurement run.",
]

REASONING = [
    "Okay, let me think about what is being asked here.",
    "The user wants a clear and correct answer.",
    "First I should identify the key facts involved.",
    "Let me check the constraints in the question again.",
    "I need to keep the answer concise and accurate.",
    "Let me verify each step before writing the final answer.",
    "That seems consistent, but I will double-check the details.",
    "I should also consider whether any edge cases matter.",
    "Now I can organize the answer in a simple structure.",
    "Let me make sure the format matches what was requested.",
]

CORRECT = {
    "capital_50": "日本の首都は東京です。",
    "free_text": ("富士山は静岡県と山梨県にまたがる日本一高い山で、標高は3776メートルです。"
                  "美しい円錐形の成層火山として知られ、古くから信仰と芸術の対象となってきました。"
                  "2013年には世界文化遺産に登録され、毎年夏には多くの登山者が山頂を目指します。"),
    "code": ("以下が実装です。\n\n```python\ndef is_prime(n):\n    if n < 2:\n        return False\n"
             "    if n % 2 == 0:\n        return n == 2\n    i = 3\n    while i * i <= n:\n"
             "        if n % i == 0:\n            return False\n        i += 2\n    return True\n```\n\n"
             "2未満の数は素数ではなく、奇数の約数を平方根まで調べます。"),
    "arithmetic": "りんご120円×3個=360円、みかん80円×5個=400円なので、合計は760円",
}
WRONG = {
    "capital_50": "日本の首都は京都で、千年以上にわたり天皇が住んだ歴史ある都市として知られています。",
    "free_text": "Mount Fuji is a tall mountain in Japan that many people like to climb in summer.",
    "code": ("```python\ndef is_prime(n):\n    for i in range(2, n):\n        if n % i == 0:\n"
             "            return False\n    return True\n```"),
    "arithmetic": "りんご120円×3個=360円、みかん80円×5個=400円なので、合計は700円",
}


@dataclass
class Plan:
    """What the model will generate: reasoning tokens first, then answer tokens.

    ``stop_after`` = natural length (EOS) in tokens; generation beyond it (ignore_eos /
    min_tokens) continues with ``filler`` text in the content channel.
    """

    reasoning: list[str]
    content: list[str]
    qid: str | None = None
    filler_seed: int = 0
    _filler: list[str] = field(default_factory=list)

    @property
    def natural_len(self) -> int:
        return len(self.reasoning) + len(self.content)

    def token(self, i: int) -> tuple[str, str]:
        """The i-th token as ``(channel, text)``; channel is ``reasoning`` or ``content``."""
        if i < len(self.reasoning):
            return "reasoning", self.reasoning[i]
        j = i - len(self.reasoning)
        if j < len(self.content):
            return "content", self.content[j]
        j -= len(self.content)
        rng = random.Random(self.filler_seed + len(self._filler))
        while j >= len(self._filler):
            self._filler.extend(tokenize((" " if self._filler or self.content else "") + rng.choice(FILLER)))
        return "content", self._filler[j]


class AnswerBook:
    """Recognises the quality prompts and the image question of the quality checks' ``quality.json``."""

    def __init__(self, quality_path: Path | None, knobs) -> None:
        self.knobs = knobs
        self.questions: dict[str, str] = {}
        self.image_prompt: str | None = None
        if quality_path and quality_path.is_file():
            q = json.loads(quality_path.read_text(encoding="utf-8"))
            for item in q.get("questions", []):
                self.questions[item["prompt"].strip()] = item["id"]
            self.image_prompt = (q.get("image") or {}).get("prompt")

    def _reasoning(self, n: int, rng: random.Random) -> list[str]:
        toks: list[str] = []
        while len(toks) < n:
            toks.extend(tokenize((" " if toks else "") + rng.choice(REASONING)))
        return toks[:n]

    def _think_len(self, base: int, qid: str | None) -> int:
        if qid is not None and ("all" in self.knobs.overthink or qid in self.knobs.overthink):
            return 1_000_000
        if self.knobs.short_thinking:
            return 12
        return max(1, int(round(base * self.knobs.thinking_scale)))

    def plan(self, text: str, images: list[bytes], thinking: bool, seed: int) -> Plan:
        """Build the generation plan for the last user message ``text`` with ``images``."""
        rng = random.Random(seed)
        stripped = text.strip()
        qid = self.questions.get(stripped)
        if images or (self.image_prompt and stripped == self.image_prompt.strip()):
            qid = "image" if qid is None else qid
            if images:
                try:
                    colour = pngdecode.dominant_colour(images[0])
                    answer = colour.capitalize() if "image" not in self.knobs.wrong and "all" not in self.knobs.wrong \
                        else ("Gray" if colour != "gray" else "Red")
                except pngdecode.PNGError as e:
                    answer = f"I cannot read this image ({e})."
            else:
                answer = "I do not see an image in your message."
            content = tokenize(answer)
            base = 60
        elif qid is not None:
            wrong = "all" in self.knobs.wrong or qid in self.knobs.wrong
            content = tokenize((WRONG if wrong else CORRECT)[qid])
            base = 700
        else:
            n = 3 + rng.randrange(3)
            content = tokenize(" ".join(rng.choice(FILLER) for _ in range(n)))
            base = 120
        reasoning = self._reasoning(self._think_len(base, qid), rng) if thinking else []
        return Plan(reasoning=reasoning, content=content, qid=qid, filler_seed=seed)


class ImageURLError(ValueError):
    """An image part vLLM would reject (message is vLLM's text)."""


def decode_image_url(url: str) -> bytes:
    """Decode an RFC 2397 base64 data URL as vLLM does; raise ImageURLError with vLLM's text."""
    if url.startswith("data:"):
        if "," not in url:
            raise ImageURLError(f"Invalid data URL {url[:40]}: missing ',' separator.")
        header, payload = url[5:].split(",", 1)
        if not header.endswith(";base64"):
            raise ImageURLError("Only base64 data URLs are supported for now.")
        try:
            return base64.b64decode(payload, validate=False)
        except Exception:
            raise ImageURLError("Only base64 data URLs are supported for now.") from None
    if url.startswith(("http://", "https://")):
        raise ImageURLError("The simulated server has no network access: send the image as a base64 data URL.")
    if url.startswith("file://"):
        raise ImageURLError("Cannot load local files without `--allowed-local-media-path`.")
    raise ImageURLError(f"Invalid image URL: {url[:40]}")
