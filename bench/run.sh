#!/usr/bin/env bash
#===- run.sh - modc benchmarks beside the PyTorch baseline ---------------===#
#
# Runs bench/torch_mod.py (eager and torch.compile) on every model of
# bench/models, then the C++ bench on the same models, which prints one table
# with both and the ratios.
#
#   bench/run.sh [BUILD_DIR]          the forward pass: bench_forward
#   bench/run.sh --train [BUILD_DIR]  one training step: `torch_mod.py --train`
#                                     and bench_train (what run_train.sh runs);
#                                     ratios routed layer / dense layer, MoD
#                                     model step / dense model step (target
#                                     <= 0.6), ours vs PyTorch eager (target
#                                     >= 1.5x)
#
# BUILD_DIR defaults to build.
# Environment: BATCH (4), ITERS (5), WARMUP (2), TORCH_COMPILE=0 to skip
# torch.compile, MODELS="layer_dense,..." to run a subset,
# TORCH_OUT=FILE to keep the PyTorch results (JSON lines).
# The training step also logs the start and end time and the load average,
# and echoes PyTorch's JSON lines, on stderr.
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ "${1:-}" == --train ]]; then
  shift
  train=1 me=run_train.sh target=bench_train packages=train-packages
  torch_flag=--train
  exec 3>&2 # PyTorch's JSON lines go to stderr as well
else
  train=0 me=run.sh target=bench_forward packages=packages torch_flag=""
  exec 3>/dev/null
fi
build="${1:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
models="${MODELS:-layer_dense,layer_routed,layer_none,model_dense,model_mod}"
bench="$build/bench/$target"
if [[ ! -x "$bench" ]]; then
  echo "$me: $bench not found; build the $target target first" >&2
  exit 1
fi

log_load() { # the training step's first and last lines
  if (( train )); then
    echo "$me: $1$(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2
  fi
}
log_load ""
if [[ -n "${TORCH_OUT:-}" ]]; then
  torch_out="$TORCH_OUT"; : > "$torch_out"
else
  torch_out="$(mktemp /tmp/torch_mod.XXXXXX.jsonl)"
  trap 'rm -f "$torch_out"' EXIT
fi
if python3 -c "import torch" 2>/dev/null; then
  compile_flag=""
  [[ "${TORCH_COMPILE:-1}" == 0 ]] && compile_flag="--no-compile"
  IFS=, read -ra names <<< "$models"
  for m in "${names[@]}"; do
    echo "torch: $m" >&2
    python3 "$here/torch_mod.py" "$here/models/$m.json" $torch_flag --json \
      --batch "$batch" --iters "$iters" --warmup "$warmup" $compile_flag \
      2>/dev/null | grep '^{' | tee -a "$torch_out" >&3 \
      || echo "torch: $m failed" >&2
  done
else
  echo "$me: PyTorch not installed (pip install torch); no baseline" >&2
fi

"$bench" --models "$here/models" --work "$build/bench/$packages" \
  --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
  --torch "$torch_out"
log_load "done "
