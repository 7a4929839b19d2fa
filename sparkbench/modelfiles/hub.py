"""A model's files on the Hugging Face Hub, read without the weights: ``config.json``, the shard
index, ``hf_quant_config.json`` and each shard's header by HTTP range requests
(``{endpoint}/{repo}/resolve/{revision}/{file}``, the Hub's download path; ``HF_ENDPOINT`` moves it).

The token (``HF_TOKEN``, for gated models) goes to the endpoint's host only: a redirect to another
host (the Hub hands large files to a CDN with a signed address) is followed without it. It never
appears in a message.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from .safetensors_header import HeaderError, Tensor, read_header
from .sources import INDEX, ModelFiles, ModelFilesError, shard_names

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 30


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follows redirects, carrying the Authorization header only to the host it was meant for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_SameHostAuth)


class HubReader:
    """Byte ranges and small files of one model repository at one revision."""

    def __init__(self, repo: str, revision: str = "main", token: str | None = None, endpoint: str | None = None):
        if repo.count("/") != 1:
            raise ModelFilesError(f"{repo!r}: a Hub model is ORG/NAME")
        self.repo, self.revision, self._token = repo, revision, token
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.bytes_read = 0

    def url(self, filename: str) -> str:
        return f"{self.endpoint}/{self.repo}/resolve/{urllib.parse.quote(self.revision, safe='')}/{filename}"

    def _open(self, filename: str, start: int | None = None, length: int | None = None):
        req = urllib.request.Request(self.url(filename), headers={"User-Agent": "sparkbench-profile"})
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        if start is not None:
            req.add_header("Range", f"bytes={start}-{start + length - 1}")
        try:
            return _OPENER.open(req, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                why = ("the token was refused (has it accepted the model's terms?)" if self._token else
                       "it is gated or private (or no such model): check the name, export HF_TOKEN (a token that "
                       "has accepted the model's terms)")
                raise ModelFilesError(f"{self.repo}: HTTP {exc.code} for {filename}: {why}") from None
            if exc.code == 404:
                raise FileNotFoundError(filename) from None
            raise ModelFilesError(f"{self.repo}: HTTP {exc.code} for {filename} from {self.endpoint}") from None
        except urllib.error.URLError as exc:
            raise ModelFilesError(f"{self.repo}: {self.endpoint} cannot be reached ({exc.reason}); "
                                  "set HF_ENDPOINT for a mirror or profile a local folder") from None

    def read_range(self, filename: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (a server that ignores Range is read no further than needed)."""
        with self._open(filename, start, length) as resp:
            if resp.status == 200 and start:
                resp.read(start)
            data = resp.read(length)
        self.bytes_read += len(data)
        return data

    def json(self, filename: str) -> dict | None:
        """A small JSON file of the repository, or None when it has none."""
        try:
            with self._open(filename) as resp:
                raw = resp.read()
        except FileNotFoundError:
            return None
        self.bytes_read += len(raw)
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ModelFilesError(f"{self.repo}: {filename} is not JSON ({exc})") from None


def read_hub(repo: str, revision: str = "main", token: str | None = None, endpoint: str | None = None) -> ModelFiles:
    """A Hub model's config and every shard's header; the weights are never requested."""
    hub = HubReader(repo, revision, token, endpoint)
    config = hub.json("config.json")
    if config is None:
        raise ModelFilesError(f"{repo}@{revision}: no config.json on {hub.endpoint}; check the name and revision")
    index = hub.json(INDEX)
    shards = shard_names(index, [] if index else ["model.safetensors"])
    tensors: list[Tensor] = []
    for shard in shards:
        try:
            found, _ = read_header(lambda start, length, s=shard: hub.read_range(s, start, length), f"{repo}/{shard}")
        except FileNotFoundError:
            raise ModelFilesError(f"{repo}@{revision}: {shard} not found; only safetensors checkpoints can be "
                                  "profiled") from None
        except HeaderError as exc:
            raise ModelFilesError(str(exc)) from None
        tensors += found
    return ModelFiles(f"{hub.endpoint}/{repo}@{revision}", config, tensors, hub.json("hf_quant_config.json"), shards,
                      hub.bytes_read)
