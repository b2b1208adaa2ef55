#!/usr/bin/env bash
# no-fuse.test's comparison: model $2 in dir $1 compiled with every fusion
# and with none; the outputs of forward (both modes), grad and sample must be
# the same bytes.
set -euo pipefail
dir="$1"; m="$2"
modc compile "$dir/$m.json" -o "$dir/$m-fused"
modc compile "$dir/$m.json" --no-fuse=residual-add,activation,rows-epilogue,select-gather,horizontal -o "$dir/$m-unfused"
modrun init "$dir/$m-fused" --seed 5 --out "$dir/$m-w.safetensors"
for v in fused unfused; do
  p="$dir/$m-$v"
  for mode in topk causal; do
    modrun forward "$p" --weights "$dir/$m-w.safetensors" \
      --tokens "$dir/tokens.safetensors" --out "$p-$mode.safetensors" --mode "$mode"
  done
  modrun grad "$p" --weights "$dir/$m-w.safetensors" \
    --tokens "$dir/train.safetensors" --out "$p-grad.safetensors"
  modrun sample "$p" --weights "$dir/$m-w.safetensors" --prompt Hello \
    --max-new 10 --seed 3 > "$p-sample.txt"
done
for out in topk.safetensors causal.safetensors grad.safetensors sample.txt; do
  cmp "$dir/$m-fused-$out" "$dir/$m-unfused-$out"
done
