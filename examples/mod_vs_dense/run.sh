#!/usr/bin/env bash
#===- run.sh - MoD vs dense: does the MoD model learn? -------------------===#
#
# Trains a dense model and an MoD model of the same shape (dense.json,
# mod.json: d_model 128, 4 layers, 4 heads, d_ff 512, seq_len 256; MoD:
# capacity 12.5 %, every other layer routed, causal_router predictor) with
# `modrun train` on the same text, same seed, batch, learning rate and
# schedule:
#
#   dense       STEPS steps
#   mod-steps   STEPS steps (same tokens, fewer FLOPs)
#   mod-flops   as many steps as have the dense run's training FLOPs
#               (flops.py --iso), the paper's isoFLOP comparison
#
# and writes out/<run>.csv (modrun's per-step log), out/<run>.json
# (summarize.py: final held-out loss, steps, tokens, FLOPs, wall time, load)
# and out/loss.png (plot.py, from the runs present in out/).
#
# Usage: examples/mod_vs_dense/run.sh [BUILD_DIR]     (default: build)
# Environment: STEPS (1200), BATCH (8), LR (3e-3), SEED (1), EVAL_EVERY (100),
# DATA (the text files of /usr/share/games/fortunes, sorted), RUNS
# ("dense mod-steps mod-flops"), WORK (out/mod_vs_dense: packages, checkpoints).
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build}"
modc="$build/bin/modc"
modrun="$build/runtime/modrun"
steps="${STEPS:-1200}"
batch="${BATCH:-8}"
lr="${LR:-3e-3}"
seed="${SEED:-1}"
eval_every="${EVAL_EVERY:-100}"
runs="${RUNS:-dense mod-steps mod-flops}"
work="${WORK:-$root/out/mod_vs_dense}"
out="$here/out"

# The Debian fortunes corpus: every text file of the fortune data directory
# (not the .dat indexes or the .u8 links), in name order. The last 10 % of
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
for m in dense mod; do
  # Compile only when missing or older than its description, so that
  # several runs (RUNS=...) can be started side by side on one package.
  if [[ ! -f "$work/$m/manifest.json" || "$here/$m.json" -nt "$work/$m/manifest.json" ]]; then
    "$modc" compile "$here/$m.json" --target cpu -o "$work/$m"
  fi
done

iso_steps="$(python3 "$here/flops.py" --iso "$here/dense.json" "$here/mod.json" "$steps")"
for run in $runs; do
  case "$run" in
    dense)     pkg=dense; n="$steps" ;;
    mod-steps) pkg=mod;   n="$steps" ;;
    mod-flops) pkg=mod;   n="$iso_steps" ;;
    *) echo "run.sh: unknown run $run" >&2; exit 2 ;;
  esac
  echo "== $run: $pkg, $n steps, batch $batch, lr $lr, seed $seed ($(uptime))" >&2
  rm -f "$out/$run.csv" "$work/$run.ckpt.safetensors"
  load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
  t0="$(date +%s.%N)"
  "$modrun" train "$work/$pkg" --data "${data[@]}" --steps "$n" \
    --batch "$batch" --lr "$lr" --seed "$seed" --eval-every "$eval_every" \
    --out "$work/$run.ckpt.safetensors" --log "$out/$run.csv"
  t1="$(date +%s.%N)"
  load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
  python3 "$here/summarize.py" "$run" "$here/$pkg.json" "$n" "$batch" \
    "$(echo "$t1 - $t0" | bc)" "$load_before" "$load_after" "$out/$run.csv" \
    > "$out/$run.json"
done
python3 "$here/plot.py" "$out"
