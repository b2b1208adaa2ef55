#!/usr/bin/env python3
"""Held-out cross-entropy of a checkpoint in `topk` and in `causal` mode.

modrun train evaluates in `topk` mode, whose top-k selection over the whole
sequence looks at later tokens. This script rebuilds modrun's held-out
batches (the first windows of seq_len + 1 bytes of the last 10 % of the
corpus), runs `modrun forward` in both modes and prints the mean
cross-entropy of each, so the number a sampler would see (`causal`: each
token routed by its own predictor decision) can be compared.

Usage: eval_causal.py MODRUN PKG CKPT SEQ_LEN N_WINDOWS FILE...
Writes temporary files next to CKPT. Prints one JSON object.
"""
import json
import math
import os
import struct
import subprocess
import sys


def write_tokens(path, rows, seq):
    data = b"".join(struct.pack("<%di" % seq, *r) for r in rows)
    header = json.dumps({"tokens": {"dtype": "I32", "shape": [len(rows), seq],
                                    "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def read_tensors(path):
    import array
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for name, v in h.items():
        if name == "__metadata__":
            continue
        s, e = v["data_offsets"]
        a = array.array("f" if v["dtype"] == "F32" else "i")
        a.frombytes(b[8 + n + s:8 + n + e])
        out[name] = (a, v["shape"])
    return out


def main(argv):
    modrun, pkg, ckpt, seq, nwin = argv[:5]
    seq, nwin = int(seq), int(nwin)
    corpus = b"".join(open(f, "rb").read() for f in argv[5:])
    # modrun holds out ceil(10 %) (and at least one batch, smaller here).
    held_start = len(corpus) - math.ceil(len(corpus) / 10)
    windows = [corpus[held_start + i * (seq + 1):held_start + (i + 1) * (seq + 1)]
               for i in range(nwin)]
    tok = os.path.splitext(ckpt)[0] + ".heldout.safetensors"
    write_tokens(tok, [list(w[:seq]) for w in windows], seq)
    res = {}
    for mode in ("topk", "causal"):
        out = os.path.splitext(ckpt)[0] + f".fwd-{mode}.safetensors"
        r = subprocess.run([modrun, "forward", pkg, "--weights", ckpt,
                            "--tokens", tok, "--mode", mode, "--out", out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            res[mode] = None
            res[mode + "_error"] = r.stderr.strip()[-200:]
            continue
        tensors = read_tensors(out)
        logits, shape = tensors["logits"]
        for name, (mask, _) in tensors.items():
            if name.startswith("routed."):
                res[f"{mode}_{name}_fraction"] = sum(mask) / len(mask)
        V = shape[2]
        total = 0.0
        for b, w in enumerate(windows):
            for i in range(seq):
                base = (b * seq + i) * V
                row = logits[base:base + V]
                m = max(row)
                lse = m + math.log(sum(math.exp(x - m) for x in row))
                total += lse - row[w[i + 1]]
        res[mode] = total / (nwin * seq)
        os.remove(out)
    os.remove(tok)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
