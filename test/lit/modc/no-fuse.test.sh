#!/usr/bin/env bash
# no-fuse.test's comparison: model $2 in dir $1 compiled with every fusion,
# with every fusion but the horizontal stacking left out (the same bytes:
# forward in both modes, grad, sample), and with the stacking left out too.
# Stacking changes which products OpenBLAS runs: for products of a few
# dozen rows it picks its small-matrix kernels by the product's size, and
# those sum over K in another order, so the unstacked package's floats may
# differ in their last bits (compare_checkpoints.py $3: to 1e-5 of each
# tensor's largest magnitude; seen: 5e-7) while its routing and sampled
# text stay the same. With every fusion off, the routed block's too
# (`plain`), the same bound and the same routing and sampled text.
set -euo pipefail
dir="$1"; m="$2"; compare="$3"
modc compile "$dir/$m.json" -o "$dir/$m-fused"
modc compile "$dir/$m.json" --no-fuse=residual-add,activation,rows-epilogue,select-gather,copy -o "$dir/$m-unfused"
modc compile "$dir/$m.json" --no-fuse=residual-add,activation,rows-epilogue,select-gather,copy,horizontal -o "$dir/$m-unstacked"
modc compile "$dir/$m.json" --no-fuse=routing,residual,residual-add,activation,rows-epilogue,router-norm,select-gather,horizontal,copy -o "$dir/$m-plain"
modrun init "$dir/$m-fused" --seed 5 --out "$dir/$m-w.safetensors"
for v in fused unfused unstacked plain; do
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
for v in unstacked plain; do
  for out in topk causal grad; do
    python3 "$compare" "$dir/$m-fused-$out.safetensors" \
      "$dir/$m-$v-$out.safetensors" --max-err 1e-5
  done
  cmp "$dir/$m-fused-sample.txt" "$dir/$m-$v-sample.txt"
done
