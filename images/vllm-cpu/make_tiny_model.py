#!/usr/bin/env python3
"""Build sparkbench/tiny-llama: a ~4.5 M-parameter Llama with random weights, offline.

Run at image build time (scripts/build_vllm_cpu_image.sh). Nothing is downloaded:

- config: transformers LlamaConfig, 2 layers, hidden 128, 2 heads of 64 (KV cache ~1 KiB per
  token in bf16), vocabulary 32768, tied embeddings, max_position_embeddings 8192, bf16;
- weights: seeded random initialisation (torch.manual_seed), saved as safetensors;
- tokenizer: a byte-level BPE (the GPT-2/Llama-3 family, which llama.cpp's converter knows how to
  read) trained with the `tokenizers` library on pseudo-English text generated here from a seeded
  random generator, plus a ChatML chat template;
- layout: an offline Hugging Face cache, <cache>/models--<org>--<name>/{blobs,snapshots/<rev>,refs/main},
  with snapshot files as relative symlinks to content-addressed blobs, so `HF_HUB_OFFLINE=1`
  resolves the id `sparkbench/tiny-llama` without a network.

Deterministic: the same inputs give the same files and the same revision.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

VOCAB_SIZE = 32768
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
BOS, EOS, IM_START, IM_END, PAD = SPECIAL_TOKENS
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | map(attribute='text') | join('') %}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
          "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr", "wh"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "oo", "ou", "y"]
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "rt", "ll"]
COMMON = ("the of and to in is that it for as with was on be by this are from at or an not have "
          "which but they his her we you all can has more one will their there been if would so "
          "model token speed memory cache request server stream decode prefill bandwidth spark "
          "vllm benchmark result report host fleet variant config build measure latency").split()


def corpus(seed: int = 0, lexicon_size: int = 60000, n_words: int = 600000) -> list[str]:
    """Pseudo-English lines: a Zipf-like draw from a generated lexicon, with numbers and code."""
    rng = random.Random(seed)
    lexicon: list[str] = []
    seen: set[str] = set()
    while len(lexicon) < lexicon_size:
        word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if word and word not in seen:
            seen.add(word)
            lexicon.append(word)
    weights = [1.0 / (rank + 10) for rank in range(len(lexicon))]
    lines: list[str] = []
    words = rng.choices(lexicon, weights=weights, k=n_words)
    i = 0
    while i < len(words):
        n = rng.randint(6, 18)
        sent = words[i:i + n]
        i += n
        sent = [rng.choice(COMMON) if rng.random() < 0.3 else w for w in sent]
        if rng.random() < 0.2:
            sent.insert(rng.randrange(len(sent) + 1), str(rng.randint(0, 100000)))
        if rng.random() < 0.05:
            sent.append(f"def {sent[0]}_{rng.randint(0, 99)}(x): return x * {rng.randint(2, 9)}")
        line = " ".join(sent)
        line = line[0].upper() + line[1:] + rng.choice([".", ".", ".", "?", "!", ",", ";", ":"])
        lines.append(line)
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    return tok


def build_files(out: Path) -> dict:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = build_tokenizer()
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        model_max_length=8192, chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False)
    fast.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=8192,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=ids[BOS],
        eos_token_id=[ids[EOS], ids[IM_END]], pad_token_id=ids[PAD])
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=ids[BOS], eos_token_id=[ids[EOS], ids[IM_END]],
                     pad_token_id=ids[PAD]).save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "tokenizer_vocab": tok.get_vocab_size(), "special_ids": ids}


def install_into_cache(src: Path, cache: Path, repo_id: str) -> Path:
    """Lay the files out as huggingface_hub does: blobs/<sha256>, snapshots/<rev>/<file> -> blob."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    digests = {}
    for path in files:
        digests[path.relative_to(src).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    rev = hashlib.sha1("".join(f"{n}\0{d}\n" for n, d in sorted(digests.items())).encode()).hexdigest()
    (repo_dir / "blobs").mkdir(parents=True)
    snap = repo_dir / "snapshots" / rev
    for name, digest in sorted(digests.items()):
        blob = repo_dir / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(src / name, blob)
            os.chmod(blob, 0o644)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    return snap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="Hugging Face hub cache directory (HF_HUB_CACHE)")
    ap.add_argument("--repo-id", default="sparkbench/tiny-llama")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        info = build_files(Path(tmp))
        snap = install_into_cache(Path(tmp), Path(args.cache), args.repo_id)
    info.update(repo_id=args.repo_id, snapshot=str(snap), revision=snap.name)
    (Path(args.cache).parent / (args.repo_id.split("/")[-1] + ".json")).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    print(f"make_tiny_model: {args.repo_id} rev {snap.name}: {info['params']} params, "
          f"tokenizer vocab {info['tokenizer_vocab']}, in {snap}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
