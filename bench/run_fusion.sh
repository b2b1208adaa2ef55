#!/usr/bin/env bash
#===- run_fusion.sh - What each epilogue fusion brings -------------------===#
#
# Usage: bench/run_fusion.sh [BUILD_DIR]
#
# Times the same models compiled with every fusion (modc's default), with
# each fusion left out (modc --no-fuse=residual-add, --no-fuse=activation,
# --no-fuse=rows-epilogue: the routed block's gated scatter, which only the
# MoD model's forward pass has; training keeps the product for the backward
# pass) and with all three left out, in one run: the forward pass (bench_forward) and
# the training step (bench_train) of the 4-layer dense and MoD models. Each
# time is printed against the default's. No PyTorch. Environment: BATCH (4),
# ITERS (5), WARMUP (2); OMP_WAIT_POLICY as for run.sh.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
models=model_dense,model_mod
variants=(all no-residual-add no-activation no-rows-epilogue none)
flags_of() {
  case "$1" in
    all) echo "" ;;
    no-residual-add) echo "--no-fuse=residual-add" ;;
    no-activation) echo "--no-fuse=activation" ;;
    no-rows-epilogue) echo "--no-fuse=rows-epilogue" ;;
    none) echo "--no-fuse=residual-add,activation,rows-epilogue" ;;
  esac
}
for t in bench_forward bench_train; do
  [[ -x "$build/bench/$t" ]] || { echo "run_fusion.sh: $build/bench/$t not found; build it first" >&2; exit 1; }
done
echo "run_fusion.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +%FT%TZ)" >&2
out="$(mktemp -d /tmp/run_fusion.XXXXXX)"
trap 'rm -rf "$out"' EXIT
for v in "${variants[@]}"; do
  echo "run_fusion.sh: ${v} ($(flags_of "$v"))" >&2
  export MODC_BENCH_FLAGS="$(flags_of "$v")"
  work="$build/bench/fusion-$v"
  "$build/bench/bench_forward" --models "$here/models" --work "$work/forward" \
    --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
    > "$out/forward-$v.txt"
  "$build/bench/bench_train" --models "$here/models" --work "$work/train" \
    --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
    > "$out/train-$v.txt"
done
python3 - "$out" "${variants[@]}" <<'PY'
import sys
out, variants = sys.argv[1], sys.argv[2:]
def rows(kind, v):
    table = {}
    for line in open(f"{out}/{kind}-{v}.txt"):
        f = line.split()
        if f and f[0] in ("model_dense", "model_mod"):
            try:
                table[f[0]] = float(f[1])
            except (ValueError, IndexError):
                pass
    return table
print("| measure | " + " | ".join(variants) + " | " +
      " | ".join(f"{v} / all" for v in variants[1:]) + " |")
print("|---|" + "---:|" * (2 * len(variants) - 1))
for kind, unit in (("forward", "ms"), ("train", "step ms")):
    tables = [rows(kind, v) for v in variants]
    for key in tables[0]:
        vals = [t.get(key) for t in tables]
        ratios = [v / vals[0] if v else float("nan") for v in vals[1:]]
        print(f"| {kind} {key} ({unit}) | " +
              " | ".join(f"{v:.1f}" if v is not None else "n/a" for v in vals) +
              " | " + " | ".join(f"{r:.3f}" for r in ratios) + " |")
print("\n(ratio > 1: slower than with every fusion)")
PY
