"""Compares the F32 tensors of two safetensors files (same names, shapes).

  compare_checkpoints.py A B [--max-err X]

Prints "tensors N identical|differ max_rel R max_err E rel_l2 L" where, over
the tensors and their elements:
  R is the largest |a - b| / max(|a|, |b|) (0 where both are 0);
  E the largest |a - b| / max |a|, the error against the tensor's scale;
  L the largest ||a - b|| / ||a||.
R is shown, not checked: an element near zero that a sum cancels to almost
nothing has a large relative error from one ulp of its terms. With
--max-err, exits 1 when E exceeds X. Exits 1 when the names or shapes differ.
"""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        count = (end - begin) // 4
        fmt = "<%d%s" % (count, "f" if e["dtype"] == "F32" else "i")
        out[name] = (e["dtype"], e["shape"], struct.unpack(fmt, data[begin:end]))
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
limit = float(sys.argv[sys.argv.index("--max-err") + 1]) if "--max-err" in sys.argv else None
if sorted(a) != sorted(b):
    print("tensor names differ")
    sys.exit(1)
worst, scaled, same, l2 = 0.0, 0.0, True, 0.0
for name in sorted(a):
    da, sa, va = a[name]
    db, sb, vb = b[name]
    if (da, sa) != (db, sb):
        print("%s: %s %s vs %s %s" % (name, da, sa, db, sb))
        sys.exit(1)
    diff2 = norm2 = 0.0
    scale = max((abs(x) for x in va), default=0.0)
    for x, y in zip(va, vb):
        norm2 += float(x) * x
        if x != y:
            same = False
            worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
            scaled = max(scaled, abs(x - y) / scale if scale else float("inf"))
            diff2 += float(x - y) ** 2
    if diff2:
        l2 = max(l2, (diff2 / norm2) ** 0.5 if norm2 else float("inf"))
print("tensors %d %s max_rel %.3g max_err %.3g rel_l2 %.3g"
      % (len(a), "identical" if same else "differ", worst, scaled, l2))
sys.exit(1 if limit is not None and scaled > limit else 0)
