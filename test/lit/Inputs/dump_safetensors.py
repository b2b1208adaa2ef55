"""Prints a safetensors file's tensors, one a line, sorted by name:

  NAME DTYPE [SHAPE] finite|NONFINITE            (F32)
  NAME DTYPE [SHAPE] rowsums=[s0, s1, ...]        (I32, summed over the last axis)
"""
import json
import math
import struct
import sys

with open(sys.argv[1], "rb") as f:
    blob = f.read()
(n,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8:8 + n])
data = blob[8 + n:]
for name in sorted(k for k in header if k != "__metadata__"):
    entry = header[name]
    begin, end = entry["data_offsets"]
    raw = data[begin:end]
    shape = entry["shape"]
    count = 1
    for d in shape:
        count *= d
    line = "%s %s [%s]" % (name, entry["dtype"], ", ".join(map(str, shape)))
    if entry["dtype"] == "F32":
        values = struct.unpack("<%df" % count, raw)
        line += " finite" if all(math.isfinite(v) for v in values) else " NONFINITE"
    elif entry["dtype"] == "I32":
        values = struct.unpack("<%di" % count, raw)
        last = shape[-1] if shape else 1
        sums = [sum(values[i:i + last]) for i in range(0, count, last)]
        line += " rowsums=[%s]" % ", ".join(map(str, sums))
    print(line)
