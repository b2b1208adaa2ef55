#!/usr/bin/env bash
#===- run_fusion.sh - What each epilogue fusion brings -------------------===#
#
# Usage: bench/run_fusion.sh [BUILD_DIR]
#
# Times the same models compiled with every fusion (modc's default), with
# each fusion left out (modc --no-fuse=residual-add, --no-fuse=activation,
# --no-fuse=rows-epilogue: the routed block's gated scatter, which only the
# MoD model's forward pass and decode steps have; training keeps the
# product for the backward pass; --no-fuse=router-norm: the routed block's
# RMSNorm statistics in its router's pass, the MoD model's forward and
# training; --no-fuse=select-gather: the routed block's gather in the
# kernel that selects its rows, the MoD model's forward and training;
# --no-fuse=horizontal: Q, K and V as one stacked product, and the gate and
# up projections where they are narrow enough; --no-fuse=copy: a copy
# stored by the row kernel that wrote its source, which these f32 models'
# plans do not have: their copies' sources come from GEMM epilogues) and
# with all seven left out, in one run:
# the forward pass (bench_forward), the training step (bench_train) and
# decoding (bench_decode) of the 4-layer dense and MoD models. The variants
# run ROUNDS times in turn (all, no-residual-add, ..., all, ...); the table
# gives each variant's median and its ratio to the default's. No PyTorch.
# Environment: BATCH (4), ITERS (5), WARMUP (2), ROUNDS (2), NEW (32,
# decode tokens), VARIANTS (all of them; a space-separated subset starting
# with "all", such as "all no-router-norm", times only those);
# OMP_WAIT_POLICY as for run.sh.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
rounds="${ROUNDS:-2}"; new_tokens="${NEW:-32}"
models=model_dense,model_mod
variants=(all no-residual-add no-activation no-rows-epilogue no-router-norm no-select-gather no-horizontal no-copy none)
if [[ -n "${VARIANTS:-}" ]]; then
  read -r -a variants <<< "$VARIANTS"
  [[ "${variants[0]}" == all ]] || { echo "run_fusion.sh: VARIANTS must start with all" >&2; exit 2; }
fi
flags_of() {
  case "$1" in
    all) echo "" ;;
    no-residual-add) echo "--no-fuse=residual-add" ;;
    no-activation) echo "--no-fuse=activation" ;;
    no-rows-epilogue) echo "--no-fuse=rows-epilogue" ;;
    no-router-norm) echo "--no-fuse=router-norm" ;;
    no-select-gather) echo "--no-fuse=select-gather" ;;
    no-horizontal) echo "--no-fuse=horizontal" ;;
    no-copy) echo "--no-fuse=copy" ;;
    none) echo "--no-fuse=residual-add,activation,rows-epilogue,router-norm,select-gather,horizontal,copy" ;;
    *) echo "run_fusion.sh: unknown variant '$1'" >&2; exit 2 ;;
  esac
}
for v in "${variants[@]}"; do flags_of "$v" > /dev/null; done
for t in bench_forward bench_train bench_decode; do
  [[ -x "$build/bench/$t" ]] || { echo "run_fusion.sh: $build/bench/$t not found; build it first" >&2; exit 1; }
done
echo "run_fusion.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +%FT%TZ)" >&2
out="$(mktemp -d /tmp/run_fusion.XXXXXX)"
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    echo "run_fusion.sh: round $r, ${v} ($(flags_of "$v"))" >&2
    export MODC_BENCH_FLAGS="$(flags_of "$v")"
    work="$build/bench/fusion-$v"
    "$build/bench/bench_forward" --models "$here/models" --work "$work/forward" \
      --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
      > "$out/forward-$v-$r.txt"
    "$build/bench/bench_train" --models "$here/models" --work "$work/train" \
      --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
      > "$out/train-$v-$r.txt"
    "$build/bench/bench_decode" --models "$here/models" --work "$work/decode" \
      --new "$new_tokens" --repeats 3 --prompt 256 > "$out/decode-$v-$r.txt"
  done
done
python3 - "$out" "$rounds" "${variants[@]}" <<'PY'
import statistics, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def timed(kind, v, r):
    """{measure: value} of one run's output."""
    table = {}
    for line in open(f"{out}/{kind}-{v}-{r}.txt"):
        f = line.split()
        if kind == "decode":
            # model batch tokens/s routed-frac KV-used KV-reserved
            if len(f) == 6 and f[0] in ("model_dense", "model_mod"):
                table[f"decode {f[0]} batch {f[1]} (tokens/s)"] = float(f[2])
        elif f and f[0] in ("model_dense", "model_mod"):
            try:
                unit = "ms" if kind == "forward" else "step ms"
                table[f"{kind} {f[0]} ({unit})"] = float(f[1])
            except (ValueError, IndexError):
                pass
    return table
print("| measure | " + " | ".join(variants) + " | " +
      " | ".join(f"{v} / all" for v in variants[1:]) + " |")
print("|---|" + "---:|" * (2 * len(variants) - 1))
for kind in ("forward", "train", "decode"):
    runs = {v: [timed(kind, v, r) for r in range(1, rounds + 1)]
            for v in variants}
    for key in runs[variants[0]][0]:
        med = []
        for v in variants:
            vals = [t[key] for t in runs[v] if key in t]
            med.append(statistics.median(vals) if vals else None)
        ratios = [m / med[0] if m and med[0] else float("nan") for m in med[1:]]
        print(f"| {key} | " +
              " | ".join(f"{m:.1f}" if m is not None else "n/a" for m in med) +
              " | " + " | ".join(f"{x:.3f}" for x in ratios) + " |")
print("\n(times: ratio > 1 is slower than with every fusion; tokens/s: "
      "ratio < 1 is slower)")
PY
