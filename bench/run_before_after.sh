#!/usr/bin/env bash
#===- run_before_after.sh - Two builds of modc timed side by side -------===#
#
# Usage: bench/run_before_after.sh BEFORE_BUILD [AFTER_BUILD]
#
# Times the packages two builds of modc make (BEFORE_BUILD: a build of an
# earlier commit, for example in a `git worktree`; AFTER_BUILD: default
# build) in one run, alternating between them: the forward pass
# (bench_forward), the training step (bench_train) and decode
# (bench_decode) of the 4-layer dense and MoD models. Each build's bench
# binaries compile with that build's modc (MODC_BINARY is compiled in) and
# run with that build's runtime, so packages of different ABI versions can
# be compared. Every measurement runs ROUNDS times in the order
# before, after, before, after, ...; the table gives the median of the
# rounds and after / before. Environment: BATCH (4), ITERS (5),
# WARMUP (2), ROUNDS (2), NEW (32, decode tokens), OMP_WAIT_POLICY as for
# run.sh. No PyTorch.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[[ $# -ge 1 ]] || { echo "usage: bench/run_before_after.sh BEFORE_BUILD [AFTER_BUILD]" >&2; exit 2; }
before="$1"; after="${2:-build}"
batch="${BATCH:-4}"; iters="${ITERS:-5}"; warmup="${WARMUP:-2}"
rounds="${ROUNDS:-2}"; new_tokens="${NEW:-32}"
models=model_dense,model_mod
for b in "$before" "$after"; do
  for t in bench_forward bench_train bench_decode; do
    [[ -x "$b/bench/$t" ]] || { echo "run_before_after.sh: $b/bench/$t not found; build it first" >&2; exit 1; }
  done
done
echo "run_before_after.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(date -u +%FT%TZ)" >&2
out="$(mktemp -d /tmp/run_before_after.XXXXXX)"
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    b="$before"; [[ $side == after ]] && b="$after"
    echo "run_before_after.sh: round $r, $side ($b)" >&2
    work="$out/work-$side"
    "$b/bench/bench_forward" --models "$here/models" --work "$work/forward" \
      --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
      > "$out/forward-$side-$r.txt"
    "$b/bench/bench_train" --models "$here/models" --work "$work/train" \
      --batch "$batch" --iters "$iters" --warmup "$warmup" --only "$models" \
      > "$out/train-$side-$r.txt"
    "$b/bench/bench_decode" --models "$here/models" --work "$work/decode" \
      --new "$new_tokens" --repeats 3 --prompt 256 > "$out/decode-$side-$r.txt"
  done
done
python3 - "$out" "$rounds" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def timed(kind, side, r):
    """{measure: value} of one run's output."""
    table = {}
    for line in open(f"{out}/{kind}-{side}-{r}.txt"):
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
print("| measure | before | after | after / before | rounds (before; after) |")
print("|---|---:|---:|---:|---|")
for kind in ("forward", "train", "decode"):
    runs = {s: [timed(kind, s, r) for r in range(1, rounds + 1)]
            for s in ("before", "after")}
    for key in runs["before"][0]:
        vals = {s: [t[key] for t in runs[s] if key in t] for s in runs}
        med = {s: statistics.median(v) for s, v in vals.items() if v}
        if len(med) < 2:
            continue
        listed = "; ".join(", ".join(f"{x:.1f}" for x in vals[s])
                           for s in ("before", "after"))
        print(f"| {key} | {med['before']:.1f} | {med['after']:.1f} | "
              f"{med['after'] / med['before']:.3f} | {listed} |")
print("\n(times: after / before > 1 is slower; tokens/s: > 1 is faster)")
PY
