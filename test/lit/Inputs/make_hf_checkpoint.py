"""Writes the safetensors of a Llama checkpoint for DIR/config.json.

  make_hf_checkpoint.py DIR [--dtype BF16|F16|F32] [--drop NAME] [--extra NAME]
                        [--reshape NAME] [--lm-head] [--shards N] [--int NAME]

Every tensor that a LlamaForCausalLM with that config has (Hugging Face's
names), filled with small pseudo-random values (fixed seed), as
DIR/model.safetensors, or with --shards N as N files named in
DIR/model.safetensors.index.json. The options damage it for the tests of
`modc import-hf`'s refusals: --drop leaves a tensor out, --extra adds one,
--reshape gives one a wrong shape, --int stores one as I32, --lm-head adds
lm_head.weight (different from the embedding) even when the embeddings are
tied. The standard library only: the tests need no PyTorch.
"""
import json
import os
import random
import struct
import sys


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    # BF16: the high half of the float's bits (the values are exact in it).
    words = struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values))
    return struct.pack("<%dH" % len(values), *[w >> 16 for w in words])


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    dtype = arg("--dtype", "BF16")
    d, v, ff = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads) * (d // heads)
    shapes = [("model.embed_tokens.weight", [v, d])]
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        shapes += [(p + "input_layernorm.weight", [d]),
                   (p + "self_attn.q_proj.weight", [d, d]),
                   (p + "self_attn.k_proj.weight", [kv, d]),
                   (p + "self_attn.v_proj.weight", [kv, d]),
                   (p + "self_attn.o_proj.weight", [d, d]),
                   (p + "post_attention_layernorm.weight", [d]),
                   (p + "mlp.gate_proj.weight", [ff, d]),
                   (p + "mlp.up_proj.weight", [ff, d]),
                   (p + "mlp.down_proj.weight", [d, ff])]
    shapes.append(("model.norm.weight", [d]))
    if not c.get("tie_word_embeddings", False) or "--lm-head" in sys.argv:
        shapes.append(("lm_head.weight", [v, d]))
    if arg("--extra"):
        shapes.append((arg("--extra"), [2]))
    rng = random.Random(1)
    tensors = []
    for name, shape in shapes:
        if name == arg("--drop"):
            continue
        if name == arg("--reshape"):
            shape = shape[:-1] + [shape[-1] + 1]
        n = 1
        for s in shape:
            n *= s
        if name == arg("--int"):
            tensors.append((name, ("I32", shape, struct.pack("<%di" % n, *[1] * n))))
            continue
        # Multiples of 1/64 in [-1, 1]: exact in BF16 and F16; norms near 1.
        base = 1.0 if name.endswith("norm.weight") else 0.0
        values = [base + rng.randint(-16, 16) / 64.0 for _ in range(n)]
        tensors.append((name, (dtype, shape, encode(values, dtype))))
    shards = int(arg("--shards", "0"))
    if not shards:
        write(os.path.join(out, "model.safetensors"), tensors)
        return
    weight_map = {}
    for i in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = tensors[i::shards]
        write(os.path.join(out, file), part)
        weight_map.update({name: file for name, _ in part})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


if __name__ == "__main__":
    main()
