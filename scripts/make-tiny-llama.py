#!/usr/bin/env python3
"""Writes the tiny random Llama checkpoint of test/data/tiny-llama.

  pip install torch transformers tokenizers safetensors
  python3 scripts/make-tiny-llama.py [--out test/data/tiny-llama] [--kv-heads 2]

Run by hand, once; CI reads only what it wrote (docs/huggingface.md). The
directory gets:

  config.json, model.safetensors   a LlamaForCausalLM (d 64, 2 layers, 4 heads,
                                   2 KV heads, d_ff 128, 64 positions, tied
                                   embeddings) with random weights, saved BF16
  tokenizer.json                   a byte-level BPE of about 300 tokens,
                                   trained with `tokenizers` on the fortunes
  tokens.safetensors               `tokens`, I32 [2, 64]: text the tokenizer
                                   encoded
  logits.safetensors               `logits`, F32 [2, 64, V]: what transformers
                                   computes for those tokens in f32, from the
                                   BF16 weights
  token-ids.json                   strings (ASCII and not) and the ids the
                                   tokenizer gives them

The weights are drawn with a larger spread than transformers' default
(std 0.2, norm weights around 1), so that attention is far from uniform and
a wrong RoPE, head grouping or norm shows in the logits.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and\ttabs\nnewline",
    "numbers 12345 and 3.14159",
    "café crème brûlée: é è ê",
    "日本語のテキスト",
    "emoji 🙂🚀 and ZWJ 👩‍💻",
    "",
]


def corpus(path, size):
    with open(path, "rb") as f:
        return f.read(size).decode("utf-8", errors="replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="test/data/tiny-llama")
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--corpus", default="/usr/share/games/fortunes/fortunes")
    parser.add_argument("--vocab", type=int, default=300)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    # A byte-level BPE: GPT-2's pre-tokenizer regex and byte alphabet.
    text = corpus(args.corpus, 8192)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([text], trainer=trainer)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=args.kv_heads, max_position_embeddings=64,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        hidden_act="silu", bos_token_id=0, eos_token_id=0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    for extra in ["generation_config.json"]:
        path = os.path.join(args.out, extra)
        if os.path.exists(path):
            os.remove(path)

    # The reference: reload the BF16 checkpoint and compute in f32.
    ref = LlamaForCausalLM.from_pretrained(
        args.out, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    ids = tokenizer.encode(corpus(args.corpus, 4096)).ids
    seq = config.max_position_embeddings
    tokens = torch.tensor([ids[0:seq], ids[1000:1000 + seq]], dtype=torch.int64)
    with torch.no_grad():
        logits = ref(input_ids=tokens).logits.float().contiguous()
    save_file({"tokens": tokens.to(torch.int32).contiguous()},
              os.path.join(args.out, "tokens.safetensors"))
    save_file({"logits": logits}, os.path.join(args.out, "logits.safetensors"))

    cases = [{"text": s, "ids": tokenizer.encode(s, add_special_tokens=False).ids}
             for s in STRINGS]
    with open(os.path.join(args.out, "token-ids.json"), "w", encoding="utf-8") as f:
        f.write('{"tokenizer": "tokenizer.json", "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {args.out}: vocab {vocab}, logits {list(logits.shape)}, "
          f"max |logit| {logits.abs().max().item():.3f}")


if __name__ == "__main__":
    main()
