#!/usr/bin/env bash
#===- run.sh - modc forward benchmark beside the PyTorch baseline ---------===#
#
# Runs bench/torch_mod.py (eager and torch.compile) on every model of
# bench/models, then bench_forward on the same models, which prints one table
# with both and the ratios.
#
# Usage: bench/run.sh [BUILD_DIR]     (default: build)
# Environment: BATCH (4), ITERS (5), WARMUP (2), TORCH_COMPILE=0 to skip
# torch.compile, MODELS="layer_dense,..." to run a subset.
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
models="${MODELS:-layer_dense,layer_routed,layer_none,model_dense,model_mod}"
bench="$build/bench/bench_forward"
if [[ ! -x "$bench" ]]; then
  echo "run.sh: $bench not found; build the bench_forward target first" >&2
  exit 1
fi

torch_out="$(mktemp /tmp/torch_mod.XXXXXX.jsonl)"
trap 'rm -f "$torch_out"' EXIT
if python3 -c "import torch" 2>/dev/null; then
  compile_flag=""
  [[ "${TORCH_COMPILE:-1}" == 0 ]] && compile_flag="--no-compile"
  IFS=, read -ra names <<< "$models"
  for m in "${names[@]}"; do
    echo "torch: $m" >&2
    python3 "$here/torch_mod.py" "$here/models/$m.json" --json \
      --batch "$batch" --iters "$iters" --warmup "$warmup" $compile_flag \
      2>/dev/null | grep '^{' >> "$torch_out" || echo "torch: $m failed" >&2
  done
else
  echo "run.sh: PyTorch not installed (pip install torch); no baseline" >&2
fi

"$bench" --models "$here/models" --work "$build/bench/packages" \
  --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
  --torch "$torch_out"
