#!/usr/bin/env bash
#===- run.sh - MoDE isoFLOP: dense, MoD, MoE and MoDE at equal FLOPs ------===#
#
# Trains five models of the same shape (d_model 128, 4 layers, 4 heads,
# seq_len 256, bytes; the descriptions beside this script) with
# `modrun train` on the same text, batch, learning rate and schedule, each
# for as many steps as have the training FLOPs of DENSE_STEPS dense steps
# (../mod_vs_dense/flops.py --iso), once per seed of the initial weights:
#
#   dense             SwiGLU d_ff 512
#   mod               MoD: every other layer routed at 12.5 %
#   moe               every MLP a top-1 MoE of 4 experts (d_expert 512)
#   mode-integrated   the MoE with 4 no-op experts beside the 4 real ones
#   mode-staged       MoD routing around every other layer, MoE MLPs
#
# and writes out/<model>.s<seed>.csv (modrun's per-step log),
# out/<model>.s<seed>.log (its report: losses, MoE shares),
# out/<model>.s<seed>.json (../mod_vs_dense/summarize.py) and out/loss.png
# with a Markdown table on stdout (plot.py).
#
# Usage: examples/mode_isoflop/run.sh [BUILD_DIR]     (default: build)
# Environment: DENSE_STEPS (1200), BATCH (8), LR (3e-3), SEEDS ("1 2"),
# EVAL_EVERY (100), MODELS (the five above), DATA (the text files of
# /usr/share/games/fortunes, sorted), WORK (out/mode_isoflop: packages,
# checkpoints), OUT (out/ beside this script: logs, summaries, plot).
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build}"
modc="$build/bin/modc"
modrun="$build/runtime/modrun"
dense_steps="${DENSE_STEPS:-1200}"
batch="${BATCH:-8}"
lr="${LR:-3e-3}"
seeds="${SEEDS:-1 2}"
eval_every="${EVAL_EVERY:-100}"
models="${MODELS:-dense mod moe mode-integrated mode-staged}"
work="${WORK:-$root/out/mode_isoflop}"
out="${OUT:-$here/out}"
tools="$here/../mod_vs_dense"

# The Debian fortunes corpus, as in ../mod_vs_dense/run.sh: the last 10 % of
# the bytes is modrun's held-out split.
if [[ -z "${DATA:-}" ]]; then
  DATA="$(find /usr/share/games/fortunes -maxdepth 1 -type f \
            ! -name '*.dat' ! -name '*.u8' | sort | tr '\n' ' ')"
fi
read -ra data <<< "$DATA"
if [[ ${#data[@]} -eq 0 ]]; then
  echo "run.sh: no data (apt-get install fortunes)" >&2
  exit 1
fi

mkdir -p "$work" "$out"
for m in $models; do
  [[ -f "$here/$m.json" ]] || { echo "run.sh: unknown model $m" >&2; exit 2; }
  if [[ ! -f "$work/$m/manifest.json" || "$here/$m.json" -nt "$work/$m/manifest.json" ]]; then
    "$modc" compile "$here/$m.json" --target cpu -o "$work/$m"
  fi
done

for seed in $seeds; do
  for m in $models; do
    run="$m.s$seed"
    n="$(python3 "$tools/flops.py" --iso "$here/dense.json" "$here/$m.json" "$dense_steps")"
    echo "== $run: $n steps, batch $batch, lr $lr ($(uptime))" >&2
    rm -f "$out/$run.csv" "$work/$run.ckpt.safetensors"
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    t0="$(date +%s.%N)"
    "$modrun" train "$work/$m" --data "${data[@]}" --steps "$n" \
      --batch "$batch" --lr "$lr" --seed "$seed" --eval-every "$eval_every" \
      --out "$work/$run.ckpt.safetensors" --log "$out/$run.csv" \
      2> >(tee "$out/$run.log" >&2)
    t1="$(date +%s.%N)"
    load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
    python3 "$tools/summarize.py" "$run" "$here/$m.json" "$n" "$batch" \
      "$(echo "$t1 - $t0" | bc)" "$load_before" "$load_after" "$out/$run.csv" \
      > "$out/$run.json"
  done
done
python3 "$here/plot.py" "$out"
