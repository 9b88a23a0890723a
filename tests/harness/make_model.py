#!/usr/bin/env python
"""Build the tiny random-weight Llama served by the real-vLLM integration tests.

Run with the vLLM venv's python (it needs torch, transformers and tokenizers)::

    $VENV/bin/python tests/harness/make_model.py --max-pos 32768

Writes ``${MODELOPS_VLLM_CACHE:-~/.cache/modelops-vllm}/models/tiny-<maxpos>`` (or ``--out``)
with ``save_pretrained``: config, safetensors weights, a WordLevel tokenizer trained locally on
generated English-ish text (one token per word/punctuation mark, so long prompts are easy to
size) and a chat template. Cached: a finished build writes a marker and is skipped next time.
Prints the model directory on the last line of stdout.

Model: hidden 64, 2 layers (``--layers``: more make every engine step longer, for a long single step
on cue), 2 attention heads of size 32 (vLLM's CPU attention backend rejects head sizes under 32), 2 KV
heads, intermediate 128, vocab = the trained tokenizer's size. A model with other than 2 layers is
``tiny-<maxpos>-l<layers>``.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402

MARKER = ".modelops-model-complete"
BUILD_VERSION = "2"  # bump to invalidate cached models when this script changes the model
# The tokenizer is trained on _corpus: a change of its word list must rebuild the model too.
CORPUS_DIGEST = hashlib.sha256(" ".join(_corpus.WORDS).encode()).hexdigest()[:16]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|> {{ message['content'] }} <|end|> "
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def default_cache() -> Path:
    return Path(os.environ.get("MODELOPS_VLLM_CACHE") or Path.home() / ".cache" / "modelops-vllm")


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers, decoders
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=8192, min_frequency=1, special_tokens=SPECIAL)
    corpus = [" ".join(_corpus.WORDS) + " . ,"] + [_corpus.text(200, seed=s) for s in range(300)]
    tok.train_from_iterator(corpus, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    # WordLevel has no decoder of its own; join words with spaces.
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    missing = [w for w in _corpus.WORDS if tok.token_to_id(w) is None]
    if missing:
        raise SystemExit(f"tokenizer lacks {len(missing)} corpus words, e.g. {missing[:5]}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", model_max_length=1 << 20)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path, max_pos: int, seed: int = 0, layers: int = 2) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = time.monotonic()
    tokenizer = build_tokenizer()
    t1 = time.monotonic()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=max_pos,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    # float32, not bfloat16: on this project's (virtual) Xeon a bfloat16 model kills vLLM's CPU
    # worker with SIGILL (exit code -4) on the first request although the CPU advertises
    # avx512_bf16/amx_bf16. With dtype float32 in config.json vLLM's "auto" picks float32.
    config.dtype = "float32"
    model = LlamaForCausalLM(config).to(torch.float32)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    # Older/newer transformers differ on where the chat template goes; keep it in both places.
    (tmp / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    cfg_path = tmp / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("chat_template", CHAT_TEMPLATE)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    (tmp / MARKER).write_text(json.dumps({
        "build_version": BUILD_VERSION, "corpus": CORPUS_DIGEST,
        "max_position_embeddings": max_pos, "layers": layers,
        "vocab_size": len(tokenizer), "seconds": round(time.monotonic() - t0, 2)}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"[make_model] tokenizer {t1 - t0:.1f} s (vocab {len(tokenizer)}), "
          f"model total {time.monotonic() - t0:.1f} s -> {out}", file=sys.stderr)
    return out


def is_built(out: Path) -> bool:
    try:
        info = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return info.get("build_version") == BUILD_VERSION and info.get("corpus") == CORPUS_DIGEST


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-pos", type=int, default=32768, help="max_position_embeddings")
    ap.add_argument("--layers", type=int, default=2, help="num_hidden_layers (default 2)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: $CACHE/models/tiny-<maxpos> (tiny-<maxpos>-l<layers> for other than 2 layers)")
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = ap.parse_args(argv)
    suffix = "" if args.layers == 2 else f"-l{args.layers}"
    out = args.out or default_cache() / "models" / f"tiny-{args.max_pos}{suffix}"
    if not args.force and is_built(out):
        print(f"[make_model] cached: {out}", file=sys.stderr)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f".{out.name}.lock", "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (parallel test sessions)
            if args.force or not is_built(out):
                build(out, args.max_pos, layers=args.layers)
            else:
                print(f"[make_model] cached (built meanwhile): {out}", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
