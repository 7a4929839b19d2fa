"""Automatic prefix caching as vLLM v1 does it, on the simulator's own token stream.

* The prompt is the simulator's tokenisation of the rendered chat (``render_stream``): per message
  ``<|im_start|>``, the role, ``\\n``, the content's tokens, ``<|im_end|>`` (the 4 template tokens
  per message that ``read_messages`` counts), images as placeholder tokens named by the image's
  hash (vLLM hashes multimodal inputs into the block keys), then the 3-token generation prompt
  ``<|im_start|> assistant \\n``. So a conversation's next turn starts with the previous turn's
  whole prompt, as with a real chat template.
* Only full blocks are hashed; block ``i``'s key chains the key of block ``i-1`` (vLLM's
  ``hash_block_tokens(parent_hash, tokens)``), so a key names the whole prefix up to it.
* At scheduling, the longest run of leading blocks found in the cache is a hit; the last prompt
  token is always recomputed (vLLM: "when all tokens hit the cache, we must recompute the last
  token to obtain logits"), so hits are at most ``floor((prompt - 1) / block) x block`` tokens.
* Counters as vLLM 0.33 defines them (reference serving-workloads.md §4): a scheduled request
  adds its prompt length to ``vllm:prefix_cache_queries`` and its hit tokens to
  ``vllm:prefix_cache_hits``; with caching off nothing is queried (vLLM returns before counting).
* Blocks enter the cache as prefill computes them (per chunk); the cache is an LRU bounded by the
  KV blocks the server reports (``num_gpu_blocks``) minus the blocks running requests hold
  privately (their uncached prompt and decode tokens), evicting least recently used blocks first.
"""
from __future__ import annotations

import collections
import hashlib

from . import answers

IMAGE_TOKEN = "<|image|>"


def render_stream(msgs: list, vision: bool = True) -> list[str]:
    """The prompt as simulator tokens (``len`` = ``read_messages``' count for text messages).

    Call after ``read_messages`` validated the messages (malformed parts are skipped here)."""
    from . import pngdecode
    out: list[str] = []
    for m in msgs:
        if not isinstance(m, dict):
            continue
        out += ["<|im_start|>", str(m.get("role")), "\n"]
        content = m.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else \
            (content if isinstance(content, list) else [])
        texts: list[str] = []
        images: list[str] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif part.get("type") == "image_url" and vision:
                iu = part.get("image_url")
                url = iu.get("url") if isinstance(iu, dict) else iu
                try:
                    data = answers.decode_image_url(url)
                except Exception:  # noqa: BLE001 - read_messages already judged it
                    continue
                try:
                    w, h, _ = pngdecode.decode_png(data)
                except pngdecode.PNGError:
                    w = h = 224
                tag = hashlib.sha256(data).hexdigest()[:16]
                images += [f"{IMAGE_TOKEN}{tag}"] * answers.image_tokens(w, h)
        out += answers.tokenize("".join(texts)) + images
        out.append("<|im_end|>")
    out += ["<|im_start|>", "assistant", "\n"]
    return out


def block_hashes(tokens: list[str], block_size: int) -> list[bytes]:
    """Chained keys of the full blocks of ``tokens``."""
    keys: list[bytes] = []
    parent = b""
    for i in range(len(tokens) // block_size):
        h = hashlib.sha256(parent)
        h.update("\x1f".join(tokens[i * block_size:(i + 1) * block_size]).encode("utf-8", "replace"))
        parent = h.digest()
        keys.append(parent)
    return keys


class PrefixCache:
    """Hashed KV blocks, LRU, at most ``num_blocks`` (less what running requests hold)."""

    def __init__(self, block_size: int, num_blocks: int, enabled: bool = True) -> None:
        self.block_size = max(int(block_size), 1)
        self.num_blocks = max(int(num_blocks), 1)
        self.enabled = enabled
        self.blocks: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.evictions = 0
        #: (queries, hits) of the most recent requests: vLLM's log hit rate is over the last 1000
        self.recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=1000)

    def hashes(self, tokens: list[str]) -> list[bytes]:
        return block_hashes(tokens, self.block_size) if self.enabled else []

    def lookup(self, keys: list[bytes], prompt_tokens: int) -> int:
        """Hit tokens for a request being scheduled (touches the hit blocks: most recent)."""
        if not self.enabled:
            return 0
        usable = max(prompt_tokens - 1, 0) // self.block_size
        n = 0
        for k in keys[:usable]:
            if k not in self.blocks:
                break
            self.blocks.move_to_end(k)
            n += 1
        hits = n * self.block_size
        self.recent.append((prompt_tokens, hits))
        return hits

    def insert(self, keys: list[bytes], computed_tokens: int, reserved_blocks: int = 0) -> None:
        """The blocks fully covered by ``computed_tokens`` are cached (most recent); then evict."""
        if not self.enabled:
            return
        for k in keys[:computed_tokens // self.block_size]:
            if k in self.blocks:
                self.blocks.move_to_end(k)
            else:
                self.blocks[k] = None
        limit = max(self.num_blocks - max(reserved_blocks, 0), 0)
        while len(self.blocks) > limit:
            self.blocks.popitem(last=False)
            self.evictions += 1

    def hit_rate_pct(self) -> float | None:
        """Hit rate over the recent requests, percent; None before any query (the log omits it)."""
        q = sum(a for a, _ in self.recent)
        return 100.0 * sum(b for _, b in self.recent) / q if q else None
