#!/usr/bin/env bash
#===- run_isa.sh - What a portable --march costs against native ---------===#
#
# Usage: bench/run_isa.sh [BUILD_DIR] [MARCH...]
#
# Times the same packages compiled for each MARCH (default: native and
# x86-64-v3, the portable choice of docs/cli.md) in one run: the forward
# pass (bench_forward), the training step (bench_train) and decode
# (bench_decode), each on the 4-layer dense and MoD models, then prints every
# time against the first MARCH's. No PyTorch. Environment: BATCH (4),
# ITERS (5), WARMUP (2); OMP_WAIT_POLICY as for run.sh.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
shift || true
marches=("$@")
(( ${#marches[@]} )) || marches=(native x86-64-v3)
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
models=model_dense,model_mod
for t in bench_forward bench_train bench_decode; do
  [[ -x "$build/bench/$t" ]] || { echo "run_isa.sh: $build/bench/$t not found; build it first" >&2; exit 1; }
done
echo "run_isa.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +%FT%TZ)" >&2
out="$(mktemp -d /tmp/run_isa.XXXXXX)"
trap 'rm -rf "$out"' EXIT
for march in "${marches[@]}"; do
  echo "run_isa.sh: --march=$march" >&2
  export MODC_BENCH_MARCH="$march"
  work="$build/bench/isa-$march"
  "$build/bench/bench_forward" --models "$here/models" --work "$work/forward" \
    --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
    > "$out/forward-$march.txt"
  "$build/bench/bench_train" --models "$here/models" --work "$work/train" \
    --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
    > "$out/train-$march.txt"
  "$build/bench/bench_decode" --models "$here/models" --work "$work/decode" \
    > "$out/decode-$march.txt"
done
python3 - "$out" "${marches[@]}" <<'PY'
import sys
out, marches = sys.argv[1], sys.argv[2:]
def rows(kind, march, col):
    """model (and batch for decode) -> the number in column `col`."""
    table = {}
    for line in open(f"{out}/{kind}-{march}.txt"):
        f = line.split()
        if f and f[0] in ("model_dense", "model_mod"):
            try:
                key = f[0] if kind != "decode" else f"{f[0]} batch {f[1]}"
                table[key] = float(f[col])
            except (ValueError, IndexError):
                pass
    return table
measures = [("forward", "ms", 1, False), ("train", "step ms", 1, False),
            ("decode", "tokens/s", 2, True)]
print("| measure | " + " | ".join(f"--march={m}" for m in marches) +
      " | " + " | ".join(f"{m} / {marches[0]}" for m in marches[1:]) + " |")
print("|---|" + "---:|" * (2 * len(marches) - 1))
for kind, unit, col, higher_better in measures:
    base = rows(kind, marches[0], col)
    others = [rows(kind, m, col) for m in marches]
    for key in base:
        vals = [t.get(key) for t in others]
        # Time ratios: > 1 means slower than the first --march; for
        # throughput the ratio is inverted so that > 1 still means slower.
        ratios = [(base[key] / v if higher_better else v / base[key]) if v else float("nan")
                  for v in vals[1:]]
        print(f"| {kind} {key} ({unit}) | " +
              " | ".join(f"{v:.1f}" if v is not None else "n/a" for v in vals) +
              " | " + " | ".join(f"{r:.3f}" for r in ratios) + " |")
print("\n(ratio > 1: that --march is slower than " + marches[0] +
      "; for decode, the inverse of the throughput ratio)")
PY
