"""Model profiles from the model's own files (``sparkbench profile``): the safetensors header
reader held against the safetensors library (the files are written by it), and the decode-traffic
arithmetic for a dense model with tied embeddings (the shapes of the tiny model in the real-vLLM
image, whose parameter count is known), an NVFP4 hybrid MoE with MTP and a vision tower (sharded,
with an index), a Mamba-2 hybrid and fused experts. The real layer profiles the tiny model's own
files, copied out of the image.
"""
from __future__ import annotations

import io
import json
import subprocess

import pytest
from safetensors import safe_open

from sparkbench.modelfiles import command
from sparkbench.modelfiles.facts import model_facts
from sparkbench.modelfiles.profile import ProfileMismatch, build_profile, disagreements
from sparkbench.modelfiles.safetensors_header import HeaderError, read_file_header
from sparkbench.modelfiles.sources import ModelFilesError, read_folder

from conftest import image_present
from helpers import REPO
from model_files import MOE_CONFIG, TINY_CONFIG, E, H, K, V, moe_tensors, nbytes, tiny_tensors, write_model, write_shard

# --- the header reader -------------------------------------------------------------------------

class CountingFile(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, n=-1):
        out = super().read(n)
        self.read_bytes += len(out)
        return out


@pytest.mark.unit
def test_the_header_reader_agrees_with_the_safetensors_library_and_reads_only_the_header(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = {"a.weight": ("BF16", (300, 64)), "a.weight_scale": ("F8_E4M3", (300, 4)), "packed": ("U8", (7, 5)),
               "scalar": ("F32", ()), "half": ("F16", (3,))}
    write_shard(path, tensors)
    blob = path.read_bytes()
    fh = CountingFile(blob)
    found, meta = read_file_header(fh, str(path))
    with safe_open(str(path), "np") as lib:
        expected = {k: (lib.get_slice(k).get_dtype(), tuple(lib.get_slice(k).get_shape())) for k in lib.keys()}
        assert meta == lib.metadata() == {"format": "pt"}
    assert {t.name: (t.dtype, t.shape) for t in found} == expected
    assert {t.name: t.nbytes for t in found} == {n: nbytes(s, d) for n, (d, s) in tensors.items()}
    header_len = int.from_bytes(blob[:8], "little")
    assert fh.read_bytes == 8 + header_len < len(blob) - 300 * 64 * 2


@pytest.mark.unit
@pytest.mark.parametrize("blob, words", [
    (b"\x01\x02", "shorter than"),
    ((2**40).to_bytes(8, "little") + b"{}", "outside"),
    ((5).to_bytes(8, "little") + b"{nope", "not JSON"),
    ((10).to_bytes(8, "little") + b'{"a": 1}  ', "lacks dtype"),
])
def test_a_file_that_is_not_safetensors_is_refused_naming_the_file(blob, words):
    with pytest.raises(HeaderError, match=words) as err:
        read_file_header(io.BytesIO(blob), "shard-1.safetensors")
    assert "shard-1.safetensors" in str(err.value)


@pytest.mark.unit
def test_offsets_that_contradict_the_shape_are_refused():
    head = json.dumps({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 16]}}).encode()
    with pytest.raises(HeaderError, match=r"spans 16 bytes, its shape needs 32"):
        read_file_header(io.BytesIO(len(head).to_bytes(8, "little") + head), "x")


# --- the arithmetic ----------------------------------------------------------------------------

@pytest.mark.unit
def test_dense_tied_model_counts_the_tiny_models_parameters_and_its_decode_bytes(tmp_path):
    files = read_folder(write_model(tmp_path / "tiny", TINY_CONFIG, tiny_tensors()))
    f = model_facts(files.config, files.tensors)
    assert round(f["total_params_b"] * 1e9) == 4_522_624 == round(f["active_params_b"] * 1e9)
    assert f["weight_bits"] == 16 and f["moe"] is None and not f["hybrid"] and not f["vision"]
    layer_bytes = (4 * 128 * 128 + 3 * 256 * 128 + 2 * 128) * 2
    dec = f["decode_bytes_per_token"]
    assert dec["dense"] == 2 * layer_bytes + 128 * 2                  # both layers and the final norm
    assert dec["embedding_row"] == 128 * 2                            # one row of the embedding
    assert dec["lm_head"] == 32768 * 128 * 2                          # tied: the whole embedding again
    assert dec["total"] == dec["dense"] + 256 + 32768 * 128 * 2 and dec["recurrent_state"] == 0
    assert f["kv_bytes_per_token"]["auto"] == 1024 and f["kv_bytes_per_token"]["fp8"] == 512  # 2 x 2 x 2 x 64
    hand = json.loads((REPO / "sparkbench/data/profiles/models/sparkbench__tiny-llama.json").read_text())
    assert disagreements(hand, f) == []


@pytest.mark.unit
def test_nvfp4_hybrid_moe_reads_its_chosen_experts_one_embedding_row_and_the_recurrent_state(tmp_path):
    tensors, part = moe_tensors()
    folder = write_model(tmp_path / "moe", MOE_CONFIG, tensors, shards=3)
    files = read_folder(folder)
    assert len(files.shards) == 3 and files.bytes_read < sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    f = model_facts(files.config, files.tensors)
    by = {k: sum(nbytes(s, d) for n, (d, s) in tensors.items() if part[n] == k) for k in set(part.values())}
    expert_params = 32 * H + 32 * H + H * 32                         # gate + up + down, 4-bit packed two per byte
    expert_bytes = expert_params // 2 + expert_params // 16 + 3 * 2 * 4  # + FP8 scale per 16 + F32 scalars
    assert by["routed"] == 4 * E * expert_bytes
    dec = f["decode_bytes_per_token"]
    assert dec["routed_experts"] == 4 * K * expert_bytes             # 2 of 8 experts in each of 4 layers
    assert dec["dense"] == by["dense"] and dec["embedding_row"] == H * 2 and dec["lm_head"] == V * H * 2
    gdn = 4 * 16 * 16 * 4 + (2 * 2 * 16 + 4 * 16) * 3 * 2           # fp32 state + bf16 conv window, per layer
    assert dec["recurrent_state"] == 2 * 3 * gdn                     # read and written, 3 GDN layers
    assert dec["total"] == sum(v for k, v in dec.items() if k != "total")
    assert f["kv_bytes_per_token"] == {"auto": 2 * 1 * 2 * 32 * 2, "bfloat16": 256, "fp8": 128, "fp8_e4m3": 128,
                                       "fp8_e5m2": 128}
    assert f["moe"] == {"experts": E, "experts_per_token": K, "shared_experts": 1,
                        "expert_params_m": round(expert_params / 1e6, 3), "moe_layers": 4}
    assert f["quant_algo"] == "NVFP4" and f["checkpoint_format"] == "modelopt"
    assert f["weight_bits"] == pytest.approx(expert_bytes * 8 / expert_params, abs=1e-3) and 4.5 <= f["weight_bits"] < 4.6
    assert f["attention"] == {"full_attention_layers": 1, "num_kv_heads": 2, "head_dim": 32}
    assert f["linear_attention"]["layers"] == 3 and f["hybrid"]
    assert f["mtp"] == {"supported": True, "n_predict": 1, "layer_params_b": (2 * H * H + 128 * H + H) / 1e9}
    assert f["vision"] and f["vision_params_b"] == (192 * H + H * H) / 1e9
    dense_params = by["dense"] // 2
    routed_params = 4 * E * expert_params
    assert f["total_params_b"] * 1e9 == pytest.approx(dense_params + routed_params + 2 * V * H
                                                      + 2 * H * H + 128 * H + H + 192 * H + H * H)
    assert f["active_params_b"] * 1e9 == pytest.approx(dense_params + routed_params * K / E + 2 * V * H)


@pytest.mark.unit
def test_mamba_hybrid_and_fused_experts(tmp_path):
    config = {"architectures": ["NemotronHForCausalLM"], "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048,
              "hybrid_override_pattern": "M*M", "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 16,
              "n_groups": 2, "conv_kernel": 4, "num_local_experts": 4, "num_experts_per_tok": 1}
    tensors = {"backbone.embed_tokens.weight": ("BF16", (128, 64)), "lm_head.weight": ("BF16", (128, 64)),
               "backbone.layers.1.mixer.experts.gate_up_proj": ("BF16", (4, 64, 32)),
               "backbone.layers.1.mixer.experts.down_proj": ("BF16", (4, 16, 64)),
               "backbone.layers.0.mixer.in_proj.weight": ("BF16", (96, 64))}
    f = model_facts(config, read_folder(write_model(tmp_path / "nh", config, tensors)).tensors)
    mamba = 4 * 8 * 16 * 4 + (4 * 8 + 2 * 2 * 16) * 3 * 2
    assert f["decode_bytes_per_token"]["recurrent_state"] == 2 * 2 * mamba
    assert f["attention"]["full_attention_layers"] == 1
    assert f["decode_bytes_per_token"]["routed_experts"] == (4 * 64 * 32 + 4 * 16 * 64) * 2 // 4
    assert f["moe"]["experts"] == 4 and f["moe"]["moe_layers"] == 1


# --- the profile and the command ---------------------------------------------------------------

@pytest.mark.unit
def test_a_hand_profile_that_contradicts_the_files_is_refused_naming_each_fact(tmp_path):
    files = read_folder(write_model(tmp_path / "tiny", TINY_CONFIG, tiny_tensors()))
    hand = json.loads((REPO / "sparkbench/data/profiles/models/sparkbench__tiny-llama.json").read_text())
    kept = build_profile(files, "sparkbench/tiny-llama", hand)
    assert kept["revision"] == hand["revision"] and kept["from_files"]["decode_bytes_per_token"]["lm_head"] > 0
    wrong = {**hand, "layers": 3, "attention": {**hand["attention"], "head_dim": 32}}
    with pytest.raises(ProfileMismatch) as err:
        build_profile(files, "sparkbench/tiny-llama", wrong)
    assert "layers: the profile says 3, the files 2" in str(err.value)
    assert "attention.head_dim: the profile says 32, the files 64" in str(err.value)


@pytest.mark.unit
def test_profile_command_writes_a_new_models_profile_and_names_the_fix_for_bad_input(tmp_path, capsys):
    tensors, _ = moe_tensors()
    folder = write_model(tmp_path / "hub" / "models--acme--moe-nvfp4" / "snapshots" / "abc", MOE_CONFIG, tensors)
    profiles = tmp_path / "profiles"
    assert command.profile_command(str(folder), None, str(profiles), dry_run=False) == 0
    doc = json.loads((profiles / "models" / "acme__moe-nvfp4.json").read_text())
    assert doc["id"] == "acme/moe-nvfp4" and doc["moe"]["experts"] == E and doc["from_files"]["shards"] == 1
    out = capsys.readouterr().out
    assert "bytes read per decode token" in out and "no weights" in out
    assert command.profile_command(str(tmp_path / "nowhere"), None, str(profiles), dry_run=False) == 4
    assert "not a folder" in capsys.readouterr().err
    bare = write_model(tmp_path / "bare", TINY_CONFIG, tiny_tensors())
    assert command.profile_command(str(bare), None, str(profiles), dry_run=False) == 4
    assert "pass --id ORG/NAME" in capsys.readouterr().err
    (bare / "model.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(ModelFilesError, match="shorter than"):
        read_folder(bare)


REAL_IMAGE = "sparkbench/vllm-cpu:v0.32.0"


@pytest.mark.real
@pytest.mark.skipif(not image_present(REAL_IMAGE), reason=f"{REAL_IMAGE} missing: run make setup")
def test_the_tiny_model_in_the_real_vllm_image_profiles_to_its_known_size(tmp_path):
    """The image's own files (written by images/vllm-cpu/make_tiny_model.py), copied out of a
    created (never started) container: 4,522,624 parameters, agreeing with the hand profile."""
    name = f"sparkbench-test-profile-{tmp_path.name}"
    subprocess.run(["docker", "create", "--name", name, REAL_IMAGE], check=True, capture_output=True, timeout=120)
    try:
        subprocess.run(["docker", "cp", f"{name}:/opt/sparkbench/hf-cache", str(tmp_path / "hf")], check=True,
                       capture_output=True, timeout=120)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    snapshot = next((tmp_path / "hf").glob("models--sparkbench--tiny-llama/snapshots/*"))
    files = read_folder(snapshot)
    f = model_facts(files.config, files.tensors)
    assert round(f["total_params_b"] * 1e9) == 4_522_624
    hand = json.loads((REPO / "sparkbench/data/profiles/models/sparkbench__tiny-llama.json").read_text())
    assert disagreements(hand, f) == [] and command.default_id(snapshot, files.config) == "sparkbench/tiny-llama"


@pytest.mark.unit
def test_sparkbench_profile_on_the_command_line_prints_the_profile_with_dry_run(tmp_path, capsys):
    from sparkbench.runner.cli import main

    folder = write_model(tmp_path / "tiny", TINY_CONFIG, tiny_tensors())
    profiles = tmp_path / "profiles"
    assert main(["profile", str(folder), "--id", "acme/tiny", "--profiles-dir", str(profiles), "--dry-run"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == "acme/tiny" and doc["decode_bytes_per_token"]["lm_head"] == 32768 * 128 * 2
    assert not profiles.exists()
