"""Checks modrun tokenize --tokenizer against the ids a reference tokenizer gave.

  check_token_ids.py MODRUN DIR TMP

DIR/token-ids.json holds {"tokenizer": FILE, "cases": [{"text", "ids"}]}
(written by scripts/make-tiny-llama.py with Hugging Face tokenizers). For
each non-empty text, modrun tokenize encodes it with DIR/FILE as one window
of len(ids) tokens, and the window must equal ids. Prints one line a case
and exits 1 on the first difference.
"""
import json
import os
import struct
import subprocess
import sys

modrun, data, tmp = sys.argv[1:4]
with open(os.path.join(data, "token-ids.json"), encoding="utf-8") as f:
    ref = json.load(f)
tokenizer = os.path.join(data, ref["tokenizer"])
for i, case in enumerate(ref["cases"]):
    ids = case["ids"]
    if not ids:
        continue
    text = os.path.join(tmp, "case%d.txt" % i)
    out = os.path.join(tmp, "case%d.safetensors" % i)
    with open(text, "w", encoding="utf-8", newline="") as f:
        f.write(case["text"])
    subprocess.run([modrun, "tokenize", text, "--seq-len", str(len(ids)),
                    "--tokenizer", tokenizer, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    entry = json.loads(blob[8:8 + n])["tokens"]
    begin, end = entry["data_offsets"]
    got = list(struct.unpack("<%di" % ((end - begin) // 4),
                             blob[8 + n + begin:8 + n + end]))
    if got != ids:
        print("case %d %r: modrun %s, reference %s" % (i, case["text"], got, ids))
        sys.exit(1)
    print("case %d: %d ids equal" % (i, len(ids)))
