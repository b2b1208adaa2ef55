"""Compares the `logits` tensors (F32) of two safetensors files.

  compare_logits.py REF OUT --max-err X

Prints "logits SHAPE max_err E" with E the largest |ref - out| over the
largest |ref| (the error against the reference's scale), and exits 1 when
the shapes differ or E exceeds X. Other tensors (a forward pass's routed.<l>
masks) are ignored.
"""
import json
import struct
import sys


def logits(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    entry = json.loads(blob[8:8 + n])["logits"]
    if entry["dtype"] != "F32":
        sys.exit("%s: logits are %s, expected F32" % (path, entry["dtype"]))
    begin, end = entry["data_offsets"]
    raw = blob[8 + n + begin:8 + n + end]
    return entry["shape"], struct.unpack("<%df" % (len(raw) // 4), raw)


(shape_r, ref), (shape_o, out) = logits(sys.argv[1]), logits(sys.argv[2])
limit = float(sys.argv[sys.argv.index("--max-err") + 1])
if shape_r != shape_o:
    print("logits shapes differ: %s vs %s" % (shape_r, shape_o))
    sys.exit(1)
scale = max(abs(x) for x in ref)
err = max(abs(x - y) for x, y in zip(ref, out)) / scale
print("logits %s max_err %.3g" % (shape_r, err))
sys.exit(1 if not err <= limit else 0)
