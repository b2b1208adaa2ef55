#!/usr/bin/env bash
#===- run_train.sh - modc training-step benchmark beside PyTorch ---------===#
#
# Runs `bench/torch_mod.py --train` (eager and torch.compile) on every model
# of bench/models, then bench_train on the same models, which prints one
# table with both and the ratios: routed layer / dense layer, MoD model step
# / dense model step (target <= 0.6), ours vs PyTorch eager (target >= 1.5x).
#
# Usage: bench/run_train.sh [BUILD_DIR]     (default: build)
# Environment: BATCH (4), ITERS (5), WARMUP (2), TORCH_COMPILE=0 to skip
# torch.compile, MODELS="layer_dense,..." to run a subset,
# TORCH_OUT=FILE to keep the PyTorch results (JSON lines).
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
models="${MODELS:-layer_dense,layer_routed,layer_none,model_dense,model_mod}"
bench="$build/bench/bench_train"
if [[ ! -x "$bench" ]]; then
  echo "run_train.sh: $bench not found; build the bench_train target first" >&2
  exit 1
fi

echo "run_train.sh: $(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2
if [[ -n "${TORCH_OUT:-}" ]]; then
  torch_out="$TORCH_OUT"; : > "$torch_out"
else
  torch_out="$(mktemp /tmp/torch_train.XXXXXX.jsonl)"
  trap 'rm -f "$torch_out"' EXIT
fi
if python3 -c "import torch" 2>/dev/null; then
  compile_flag=""
  [[ "${TORCH_COMPILE:-1}" == 0 ]] && compile_flag="--no-compile"
  IFS=, read -ra names <<< "$models"
  for m in "${names[@]}"; do
    echo "torch: $m" >&2
    python3 "$here/torch_mod.py" "$here/models/$m.json" --train --json \
      --batch "$batch" --iters "$iters" --warmup "$warmup" $compile_flag \
      2>/dev/null | grep '^{' | tee -a "$torch_out" >&2 \
      || echo "torch: $m failed" >&2
  done
else
  echo "run_train.sh: PyTorch not installed (pip install torch); no baseline" >&2
fi

"$bench" --models "$here/models" --work "$build/bench/train-packages" \
  --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
  --torch "$torch_out"
echo "run_train.sh: done $(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2
