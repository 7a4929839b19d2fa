"""``sparkbench profile ORG/NAME`` against a local stand-in of the Hub: config.json and the index
from the Hub's ``/resolve/`` path, each shard's header by range requests after a redirect to a
second host (as the Hub hands shards to its CDN). The token reaches the Hub's host and never the
other one; a gated model without a token is refused with the fix; only headers are transferred.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkbench.modelfiles import command
from sparkbench.modelfiles.facts import model_facts
from sparkbench.modelfiles.hub import read_hub
from sparkbench.modelfiles.sources import ModelFilesError, read_folder

from model_files import MOE_CONFIG, moe_tensors, write_model

pytestmark = pytest.mark.sim
TOKEN = "hf_standin_secret_1234"


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 with a handler built from ``route(handler)``."""

    def __init__(self, route):
        self.seen: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                   "range": self.headers.get("Range")})
                route(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.sent = 0
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def send(self, handler, body: bytes, status: int = 200, headers: dict | None = None) -> None:
        handler.send_response(status)
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        self.sent += len(body)


@pytest.fixture
def hub(tmp_path):
    """The Hub (``/acme/moe/resolve/main/...``, ``/acme/gated/...`` needing the token) and its CDN."""
    tensors, _ = moe_tensors()
    folder = write_model(tmp_path / "moe", MOE_CONFIG, tensors, shards=2)
    honour_range = {"on": True}

    def cdn_route(h):
        blob = (folder / Path(h.path).name).read_bytes()
        rng = h.headers.get("Range")
        if rng and honour_range["on"]:
            lo, hi = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            cdn.send(h, blob[lo:hi + 1], 206, {"Content-Range": f"bytes {lo}-{hi}/{len(blob)}"})
        else:
            cdn.send(h, blob)

    def hub_route(h):
        parts = h.path.strip("/").split("/")            # org, name, "resolve", rev, file
        repo, name = "/".join(parts[:2]), parts[-1]
        if repo == "acme/gated" and h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return hub_srv.send(h, b'{"error": "Access to model acme/gated is restricted."}', 401)
        path = folder / name
        if repo not in ("acme/moe", "acme/gated") or not path.exists():
            return hub_srv.send(h, b"Entry not found", 404)
        if name.endswith(".safetensors"):
            return hub_srv.send(h, b"", 302, {"Location": f"{cdn.url}/blobs/{name}"})
        hub_srv.send(h, path.read_bytes())

    cdn = Server(cdn_route)
    hub_srv = Server(hub_route)
    yield {"hub": hub_srv, "cdn": cdn, "folder": folder, "honour_range": honour_range}
    cdn.httpd.shutdown()
    hub_srv.httpd.shutdown()


def test_the_hub_reader_reads_headers_only_and_agrees_with_the_local_folder(hub):
    files = read_hub("acme/moe", endpoint=hub["hub"].url)
    local = read_folder(hub["folder"])
    assert model_facts(files.config, files.tensors) == model_facts(local.config, local.tensors)
    shard_bytes = sum(p.stat().st_size for p in hub["folder"].glob("*.safetensors"))
    assert hub["cdn"].sent == sum(8 + int.from_bytes((p.read_bytes())[:8], "little")
                                  for p in hub["folder"].glob("*.safetensors")) < shard_bytes / 5
    assert all(r["range"] for r in hub["cdn"].seen)


def test_a_server_that_ignores_range_is_read_no_further_than_the_header(hub):
    hub["honour_range"]["on"] = False
    files = read_hub("acme/moe", endpoint=hub["hub"].url)
    assert len(files.tensors) == len(moe_tensors()[0])


def test_the_token_goes_to_the_hub_and_not_to_the_host_it_redirects_to(hub):
    files = read_hub("acme/gated", token=TOKEN, endpoint=hub["hub"].url)
    assert files.config["architectures"] == MOE_CONFIG["architectures"]
    assert {r["auth"] for r in hub["hub"].seen} == {f"Bearer {TOKEN}"}
    assert hub["cdn"].seen and all(r["auth"] is None for r in hub["cdn"].seen)


def test_a_gated_model_without_a_token_is_refused_with_the_fix_and_a_wrong_token_is_never_printed(hub):
    with pytest.raises(ModelFilesError, match=r"gated or private \(or no such model\): check the name, export HF_TOKEN"):
        read_hub("acme/gated", endpoint=hub["hub"].url)
    with pytest.raises(ModelFilesError) as err:
        read_hub("acme/gated", token="hf_wrong_token_5678", endpoint=hub["hub"].url)
    assert "the token was refused" in str(err.value) and "hf_wrong_token_5678" not in str(err.value)
    with pytest.raises(ModelFilesError, match="no config.json"):
        read_hub("acme/gguf-only", endpoint=hub["hub"].url)


def test_profile_command_with_a_hub_id_writes_the_profile(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hub["hub"].url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert command.profile_command("acme/gated", None, str(tmp_path / "p"), dry_run=False) == 0
    doc = json.loads((tmp_path / "p" / "models" / "acme__gated.json").read_text())
    assert doc["id"] == "acme/gated" and doc["quant_algo"] == "NVFP4" and doc["from_files"]["shards"] == 2
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
