"""vllm_args, variant_matrix and vllm_preflight filters: pure-function tests (no Ansible run)."""
from __future__ import annotations

import hashlib
import json
import shlex

import pytest
import yaml

from sparkbench import launch as la
from sparkbench import matrix as vm
from sparkbench import preflight as vp
from sparkbench.errors import InputError

from helpers import REPO

pytestmark = pytest.mark.unit

ISSUES = yaml.safe_load((REPO / "sparkbench/data/known_issues.yml").read_text())
HW = json.loads((REPO / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
NV_MODEL = json.loads((REPO / "sparkbench/data/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json").read_text())
UN_MODEL = json.loads((REPO / "sparkbench/data/profiles/models/unsloth__Qwen3.6-35B-A3B-NVFP4.json").read_text())
INV = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())


def seed_matrix(**kw):
    return vm.variant_matrix(INV["bench_builds"], INV["bench_configs"], common_args=INV["bench_common_args"],
                             image=INV["bench_image"], **kw)


# ---- vllm_args -----------------------------------------------------------------------------

def test_seed_matrix_expands_to_the_six_seed_variants_with_the_seed_flags():
    variants = seed_matrix()
    assert [v["name"] for v in variants] == ["nvidia-bare", "nvidia-mtp2", "nvidia-mtp3",
                                             "unsloth-bare", "unsloth-mtp2", "unsloth-mtp3"]
    argv = la.vllm_argv(variants[2], port=8000)
    # The seed article's launch command for NVIDIA spec=3 (host aside: we keep 127.0.0.1).
    seed = ("nvidia/Qwen3.6-35B-A3B-NVFP4 --host 127.0.0.1 --port 8000 --quantization modelopt "
            "--kv-cache-dtype fp8 --max-model-len 65536 --max-num-seqs 8 --max-num-batched-tokens 4096 "
            "--gpu-memory-utilization 0.85 --reasoning-parser qwen3 "
            "--speculative-config {\"method\":\"mtp\",\"num_speculative_tokens\":3} "
            "--enable-prefix-caching --trust-remote-code").split()
    assert argv[:5] == seed[:5]
    pairs = lambda a: sorted(" ".join(a[i:i + 2]) if i + 1 < len(a) and not a[i + 1].startswith("--") else a[i]  # noqa: E731
                             for i in range(len(a)) if a[i].startswith("--"))
    assert pairs(argv[5:]) == pairs(seed[5:])
    # Unsloth: compressed-tensors auto-detected, so no --quantization at all.
    assert "--quantization" not in la.vllm_argv(variants[3])


def test_flag_rendering_booleans_null_json_and_name_forms():
    v = {"name": "x", "model": "m/n", "args": {"max_num_seqs": 8, "--enable-prefix-caching": False,
                                              "trust-remote-code": True, "kv-cache-dtype": None,
                                              "speculative-config": {"method": "mtp", "num_speculative_tokens": 2},
                                              "gpu-memory-utilization": 0.85}}
    assert la.vllm_argv(v, "0.0.0.0", 9000) == [
        "m/n", "--host", "0.0.0.0", "--port", "9000", "--max-num-seqs", "8", "--no-enable-prefix-caching",
        "--trust-remote-code", "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--gpu-memory-utilization", "0.85"]


@pytest.mark.parametrize("args, needle", [
    ({"port": 1}, "vllm_server_port"),
    ({"Max Seqs": 1}, "not a vLLM flag name"),
    ({"x": object()}, "--x has a value of type object"),
])
def test_bad_flags_are_one_line_errors_naming_the_field(args, needle):
    with pytest.raises(InputError, match=needle) as exc:
        la.vllm_argv({"name": "v", "model": "m", "args": args})
    assert "\n" not in str(exc.value)


def test_bad_port_and_missing_model():
    with pytest.raises(InputError, match="outside 1-65535"):
        la.vllm_argv({"name": "v", "model": "m"}, port=70000)
    with pytest.raises(InputError, match="needs 'name' and 'model'"):
        la.vllm_argv({"name": "v"})


SERVER = {"host": "127.0.0.1", "port": 8000, "container_name": "c", "hf_cache": "/cache", "gpus": True,
          "env": {"VLLM_SIM_RATE": "10"}, "secret_env": ["HF_TOKEN"]}


def test_launch_spec_is_the_one_description_of_the_container():
    v = {"name": "v", "model": "m/n", "image": "img:1", "env": {"MY_API_KEY": "k", "X": "1"},
         "args": {"api-key": "sk-123", "speculative-config": {"method": "mtp"}}}
    spec = la.launch_spec(v, SERVER)
    c = spec["container"]
    assert c["command"] == spec["argv"] == ["m/n", "--host", "127.0.0.1", "--port", "8000", "--api-key", "sk-123",
                                            "--speculative-config", '{"method":"mtp"}']
    assert c["env"] == spec["env"] == {"VLLM_SIM_RATE": "10", "MY_API_KEY": "k", "X": "1"}
    assert spec["secret_env"] == ["HF_TOKEN"]  # the value never enters the spec
    # The Hugging Face cache as set; the compile caches below the unit's home, not known here.
    assert c["volumes"] == ["/cache:/root/.cache/huggingface", "<unit home>/.cache/vllm:/root/.cache/vllm",
                            "<unit home>/.cache/flashinfer:/root/.cache/flashinfer"] and c["network_mode"] == "host"
    assert "spark_host_vllm_cache=<unit home>/.cache/vllm" in spec["unresolved"]
    assert c["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    assert la.launch_spec(v, {**SERVER, "gpus": False})["container"]["device_requests"] is None
    assert spec["health_url"] == "http://127.0.0.1:8000/health"


def test_recorded_command_redacts_secrets_but_names_them_and_round_trips_through_a_shell():
    v = {"name": "v", "model": "m/n", "image": "img:1", "env": {"MY_API_KEY": "k"},
         "args": {"api-key": "sk-123", "speculative-config": {"method": "mtp"}}}
    cmd = la.launch_spec(v, {**SERVER, "secret_env": ["HF_TOKEN", "VLLM_API_KEY"]})["command"]
    assert "sk-123" not in cmd and "=k " not in cmd
    words = shlex.split(cmd)
    assert words[:5] == ["docker", "run", "-d", "--name", "c"]
    # every variable the container gets is on the line: secrets as <redacted>
    assert {"HF_TOKEN=<redacted>", "VLLM_API_KEY=<redacted>", "MY_API_KEY=<redacted>", "VLLM_SIM_RATE=10"} <= set(words)
    assert words[words.index("img:1") + 1:] == ["m/n", "--host", "127.0.0.1", "--port", "8000", "--api-key",
                                                "<redacted>", "--speculative-config", '{"method":"mtp"}']
    assert "--gpus" in words
    assert "--gpus" not in shlex.split(la.launch_spec(v, {**SERVER, "gpus": False})["command"])


def test_config_hash_covers_flags_image_env_secret_names_and_settings_but_not_secret_values():
    v = {"name": "v", "model": "m", "image": "img:1", "env": {"X": "1"}, "args": {"max-num-seqs": 8}}

    def digest(variant=v, server=SERVER, settings=None):
        return la.config_hash(la.launch_spec(variant, server), settings or {"runs": 3})

    base = digest()
    assert len(base) == 64 and int(base, 16) >= 0
    assert base == digest(v | {"env": {"X": "1"}})
    others = {
        digest(v | {"args": {"max-num-seqs": 4}}),
        digest(v | {"image": "img:2"}),
        digest(v | {"env": {"X": "2"}}),
        digest(settings={"runs": 5}),
        digest(server={**SERVER, "secret_env": []}),  # a secret added or removed is a change; its value is not
    }
    assert base not in others and len(others) == 5
    # sha256 over canonical JSON (documented formula), reproducible by hand.
    spec = la.launch_spec(v, {**SERVER, "env": {}, "secret_env": []})
    doc = {"argv": spec["argv"], "image": "img:1", "env": {"X": "1"}, "settings": {}}
    assert la.config_hash(spec) == hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_one_secret_rule():
    from sparkbench.secrets import is_secret_name, public_env
    for name in ("HF_TOKEN", "VLLM_API_KEY", "vault_hf_token", "AWS_SECRET_ACCESS_KEY", "db_password"):
        assert is_secret_name(name), name
    for name in ("llm_bench_output_tokens", "max_tokens", "VLLM_SIM_RATE", "TOKENIZERS_PARALLELISM"):
        assert not is_secret_name(name), name
    assert public_env({"HF_TOKEN": "a", "X": 1}) == {"X": "1"}


# ---- variant_matrix ------------------------------------------------------------------------

def test_precedence_null_removal_extra_variants_select_and_profile_revision():
    builds = [{"name": "a", "model": "o/a", "args": {"q": "x"}, "env": {"E": "b"}},
              {"name": "b", "model": "o/b", "revision": "pinned", "image": "img:b"}]
    configs = [{"name": "bare"}, {"name": "mtp", "args": {"q": None, "s": 2}, "env": {"E": "c"}}]
    extra = [{"name": "a-x", "build": "a", "config": "mtp", "args": {"s": 3}, "preflight": False}]
    out = vm.variant_matrix(builds, configs, common_args={"c": 1, "q": "common"}, extra_variants=extra, image="img:d",
                            env={"E": "a", "F": "1"}, profiles={"o/a": {"revision": "r-a"}, "o/b": {"revision": "r-b"}})
    by = {v["name"]: v for v in out}
    assert list(by) == ["a-bare", "a-mtp", "b-bare", "b-mtp", "a-x"]
    assert by["a-bare"]["args"] == {"c": 1, "q": "x"} and by["a-bare"]["env"] == {"E": "b", "F": "1"}
    assert by["a-mtp"]["args"] == {"c": 1, "s": 2} and by["a-mtp"]["env"]["E"] == "c"
    assert by["a-x"]["args"] == {"c": 1, "s": 3} and by["a-x"]["preflight"] is False and by["a-x"]["kind"] == "extra"
    assert by["a-bare"]["revision"] == "r-a" and by["b-bare"]["revision"] == "pinned"
    assert by["b-bare"]["image"] == "img:b" and by["a-bare"]["image"] == "img:d"
    assert [v["index"] for v in out] == [0, 1, 2, 3, 4]
    assert [v["name"] for v in vm.variant_matrix(builds, configs, image="i", select=["b-mtp", "a-bare"])] == ["a-bare", "b-mtp"]
    assert [v["name"] for v in vm.variant_matrix(builds, configs, image="i", select="b-mtp, a-bare")] == ["a-bare", "b-mtp"]


@pytest.mark.parametrize("builds, configs, kw, needle", [
    ([{"name": "Bad Name", "model": "m"}], None, {}, r"builds\[0\]\.name 'Bad Name' is not valid"),
    ([{"name": "a"}], None, {}, r"builds\[0\] \('a'\) has no model"),
    ([{"name": "a", "model": "m", "flags": {}}], None, {}, "unknown key"),
    ([{"name": "a", "model": "m"}, {"name": "a", "model": "n"}], None, {}, "listed twice"),
    ([{"name": "a", "model": "m"}], [{"name": "bare", "args": [1]}], {}, r"configs\[0\]\.args"),
    ([{"name": "a", "model": "m"}], None, {"extra_variants": [{"name": "z", "build": "nope"}]}, "build 'nope'"),
    ([{"name": "a", "model": "m"}], None, {"extra_variants": [{"name": "a-default", "build": "a"}]}, "occurs twice"),
    ([{"name": "a", "model": "m"}], None, {"select": ["a-nope"]}, "not in the matrix; choose from a-default"),
    ([{"name": "a", "model": "o/m"}], None, {"profiles": {}}, r"no profile for model o/m; add profiles/models/o__m.json"),
    ([], None, {}, "non-empty list"),
])
def test_matrix_errors_name_the_field_and_the_fix(builds, configs, kw, needle):
    kw.setdefault("image", "img")
    with pytest.raises(InputError, match=needle) as exc:
        vm.variant_matrix(builds, configs, **kw)
    assert "\n" not in str(exc.value)


# ---- vllm_preflight / vllm_log_match -------------------------------------------------------

def _variant(**args):
    base = seed_matrix()[0]
    return dict(base, args=dict(base["args"], **args))


def test_seed_matrix_passes_preflight_on_both_builds():
    for v in seed_matrix():
        model = NV_MODEL if v["build"] == "nvidia" else UN_MODEL
        verdict = vp.vllm_preflight(v, ISSUES, model, HW)
        assert verdict["verdict"] == "pass", (v["name"], verdict)
        assert verdict["vllm_version"] == "0.25.0"
        assert "mamba_align_block_size" in verdict["checked"]


def test_mamba_rule_fires_at_2048_and_at_the_gb10_default_not_when_fixed():
    fail = vp.vllm_preflight(_variant(**{"max-num-batched-tokens": 2048}), ISSUES, NV_MODEL, HW)
    assert fail["verdict"] == "fail" and fail["failures"][0]["id"] == "mamba_align_block_size"
    assert "block_size (2096)" in fail["failures"][0]["reason"] and "(2048)" in fail["failures"][0]["reason"]
    assert "--max-num-batched-tokens 4096" in fail["failures"][0]["remedy"]
    # Flag absent → vLLM's GB10 default (hardware profile: 2048) → still fails.
    default = vp.vllm_preflight(_variant(**{"max-num-batched-tokens": None}), ISSUES, NV_MODEL, HW)
    assert default["verdict"] == "fail"
    # Either fix from the remedy passes.
    assert vp.vllm_preflight(_variant(**{"max-num-batched-tokens": 2096}), ISSUES, NV_MODEL, HW)["verdict"] == "pass"
    assert vp.vllm_preflight(_variant(**{"max-num-batched-tokens": 2048, "enable-prefix-caching": False}),
                             ISSUES, NV_MODEL, HW)["verdict"] == "pass"
    # vLLM 0.27 removed the assertion (reference/vllm.md §4.1): out of the rule's range.
    newer = dict(_variant(**{"max-num-batched-tokens": 2048}), image="vllm/vllm-openai:v0.27.0")
    assert vp.vllm_preflight(newer, ISSUES, NV_MODEL, HW)["verdict"] == "pass"
    # Dense (non-hybrid) model: not concerned.
    assert vp.vllm_preflight(_variant(**{"max-num-batched-tokens": 2048}), ISSUES, dict(NV_MODEL, hybrid=False),
                             HW)["verdict"] == "pass"
    # The bypass: preflight false on the variant.
    skipped = vp.vllm_preflight(dict(_variant(**{"max-num-batched-tokens": 2048}), preflight=False), ISSUES, NV_MODEL, HW)
    assert skipped["verdict"] == "skipped" and skipped["failures"] == []


def test_linear_backend_rule_depends_on_image_flavour_and_version():
    v = _variant(**{"linear-backend": "flashinfer_b12x"})
    assert vp.vllm_preflight(v, ISSUES, NV_MODEL, HW)["failures"][0]["id"] == "linear_backend_b12x_official"
    official = dict(v, image="vllm/vllm-openai:v0.25.0-aarch64")
    assert vp.vllm_preflight(official, ISSUES, NV_MODEL, HW)["verdict"] == "fail"
    community = dict(v, image="ghcr.io/someone/vllm-b12x:0.24.1-dev")
    assert vp.vllm_preflight(community, ISSUES, NV_MODEL, HW)["verdict"] == "pass"
    assert vp.vllm_preflight(dict(official, image_flavor="community"), ISSUES, NV_MODEL, HW)["verdict"] == "pass"
    assert vp.vllm_preflight(dict(official, image="vllm/vllm-openai:v0.32.0"), ISSUES, NV_MODEL, HW)["verdict"] == "pass"


def test_quantization_flag_vs_checkpoint_format():
    unsloth = seed_matrix()[3]
    bad = dict(unsloth, args=dict(unsloth["args"], quantization="modelopt"))
    verdict = vp.vllm_preflight(bad, ISSUES, UN_MODEL, HW)
    assert [f["id"] for f in verdict["failures"]] == ["quantization_checkpoint_mismatch"]
    assert "compressed-tensors" in verdict["failures"][0]["reason"]
    good = dict(unsloth, args=dict(unsloth["args"], quantization="compressed-tensors"))
    assert vp.vllm_preflight(good, ISSUES, UN_MODEL, HW)["verdict"] == "pass"


def test_unknown_version_checks_conservatively_and_versions_parse():
    v = dict(_variant(**{"max-num-batched-tokens": 2048}), image="myrepo/vllm:latest")
    verdict = vp.vllm_preflight(v, ISSUES, NV_MODEL, HW)
    assert verdict["vllm_version"] is None and verdict["verdict"] == "fail"
    assert vp.version_from_image("vllm/vllm-openai:v0.25.0-aarch64") == "0.25.0"
    assert vp.version_from_image("nvcr.io/nvidia/vllm:25.11-py3") == "25.11"
    assert vp.version_in_range("0.26.9", ">=0.15,<0.27") is True
    assert vp.version_in_range("0.27.0", ">=0.15,<0.27") is False
    with pytest.raises(InputError, match="not like"):
        vp.version_in_range("0.25", "~0.25")


@pytest.mark.parametrize("log, issue, remedy_part", [
    ("(EngineCore pid=1) ERROR x\nAssertionError: In Mamba cache align mode, block_size (2096) must be <= "
     "max_num_batched_tokens (2048).\n", "mamba_align_block_size", "--max-num-batched-tokens 4096"),
    ("ValueError: --linear-backend=flashinfer_b12x was requested but no 'flashinfer_b12x' kernel exists for this "
     "layer type.", "linear_backend_b12x_official", "drop --linear-backend"),
    ('Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]',
     "nvidia_runtime_missing", "nvidia-ctk runtime configure"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom", "--gpu-memory-utilization"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url https://x",
     "gated_repo", "HF_TOKEN"),
    ("Quantization method specified in the model config (compressed-tensors) does not match the quantization "
     "method specified in the `quantization` argument (modelopt).", "quantization_checkpoint_mismatch", "remove --quantization"),
])
def test_log_signatures(log, issue, remedy_part):
    match = vp.vllm_log_match(log, ISSUES)
    assert match["id"] == issue and remedy_part in match["remedy"]
    assert match["line"] and "\n" not in match["line"]
    assert "{" not in match["reason"]  # every placeholder filled or dropped


def test_log_match_fills_values_from_the_log_and_returns_none_on_unknown_logs():
    m = vp.vllm_log_match(["x", "AssertionError: In Mamba cache align mode, block_size (1600) must be <= "
                                "max_num_batched_tokens (1024)."], ISSUES)
    assert "(1600)" in m["reason"] and "(1024)" in m["reason"]
    assert vp.vllm_log_match("INFO all good\nKeyError: 'foo'", ISSUES) is None
    with pytest.raises(InputError, match="known-issues data"):
        vp.vllm_log_match("x", {"nope": 1})


def test_every_known_issue_is_well_formed():
    ids = [i["id"] for i in ISSUES["issues"]]
    assert len(ids) == len(set(ids))
    for issue in ISSUES["issues"]:
        assert issue.get("reason") and issue.get("remedy"), issue["id"]
        # cluster_check: a failure of sparkbench.cluster.check (its reason/remedy), signature optional.
        assert issue.get("preflight") or issue.get("signature") or issue.get("cluster_check"), issue["id"]
        # Every rule with preflight conditions must also recognise the failure after launch.
        if issue.get("preflight"):
            assert issue.get("signature"), issue["id"]


def test_unknown_quantization_and_string_json_flags():
    v = _variant(quantization="nvfp5")
    verdict = vp.vllm_preflight(v, ISSUES, NV_MODEL, HW)
    assert [f["id"] for f in verdict["failures"]] == ["unknown_quantization"]
    assert "quantization method nvfp5" in verdict["failures"][0]["reason"]
    assert "remove --quantization" in verdict["failures"][0]["remedy"]
    with pytest.raises(InputError, match=r"args\.speculative-config is not valid JSON.*YAML mapping"):
        vm.variant_matrix([{"name": "a", "model": "m"}],
                          [{"name": "bare", "args": {"speculative-config": '{"method": "mtp", num_speculative_tokens: 2'}}], image="i")
    ok = vm.variant_matrix([{"name": "a", "model": "m"}],
                           [{"name": "mtp", "args": {"speculative-config": '{"method":"mtp"}'}}], image="i")
    assert la.vllm_argv(ok[0])[-2:] == ["--speculative-config", '{"method":"mtp"}']


def test_port_in_use_signature_names_the_fix():
    m = vp.vllm_log_match("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
                          "address already in use", ISSUES)
    assert m["id"] == "port_in_use" and "vllm_server_port" in m["remedy"] and "already in use" in m["reason"]
