"""Writes a modrun token batch: a safetensors file with one I32 tensor
'tokens' of shape [B, S] (docs/model-format.md section 6).

  make_tokens.py OUT --batch B --seq S --vocab V [--set ROW,POS=VALUE ...]

Token (b, i) is (7 * b + 3 * i + 1) % V unless --set overrides it.
"""
import argparse
import json
import struct

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--batch", type=int, required=True)
parser.add_argument("--seq", type=int, required=True)
parser.add_argument("--vocab", type=int, required=True)
parser.add_argument("--set", action="append", default=[])
args = parser.parse_args()

tokens = [[(7 * b + 3 * i + 1) % args.vocab for i in range(args.seq)]
          for b in range(args.batch)]
for item in args.set:
    where, value = item.split("=")
    row, pos = (int(x) for x in where.split(","))
    tokens[row][pos] = int(value)

data = b"".join(struct.pack("<i", t) for row in tokens for t in row)
header = json.dumps({"tokens": {"dtype": "I32", "shape": [args.batch, args.seq],
                                "data_offsets": [0, len(data)]}}).encode()
header += b" " * (-len(header) % 8)
with open(args.out, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + data)
