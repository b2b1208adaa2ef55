#!/usr/bin/env bash
#===- run_distributed.sh - data-parallel training at 1 and 2 ranks -------===#
#
# `modrun train` of bench/models/model_dense.json and model_mod.json on the
# fortunes corpus at one global batch, in one process (OMP_NUM_THREADS =
# CORES) and as 2 MPI ranks (`mpirun -np 2 ... --comm mpi`, OMP_NUM_THREADS
# = CORES / 2 each), so both runs use the same cores. The numbers come from
# rank 0's CSV log (docs/cli.md): tokens_per_s gives the step time, comm_s
# the wall time in the collectives (loss all-gather + gradient reduction,
# waiting for the other rank included), comm_bytes the gradient bytes each
# rank puts into the reduction. Each configuration runs REPEAT times, the
# 1-rank and 2-rank runs taking turns (the machine's speed drifts between
# runs); the first WARMUP steps of each run are dropped, and the table shows
# medians over the remaining steps of all runs. Prints a markdown table on stdout
# (bench/RESULTS.md, "Data-parallel training on the CPU").
#
# Usage: bench/run_distributed.sh [BUILD_DIR]      (default: build)
# Environment: BATCH (4, the global batch), STEPS (8), WARMUP (1),
#   REPEAT (2), CORES (2), MODELS ("model_dense,model_mod"), KEEP=DIR to keep
#   the packages and logs.
# Needs modc and modrun built, Open MPI's mpirun and the mpi plugin
# (BUILD_DIR/runtime/libmodrt_mpi.so). The ranks talk over loopback TCP.
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
batch="${BATCH:-4}"; steps="${STEPS:-8}"; warmup="${WARMUP:-1}"
repeat="${REPEAT:-2}"
cores="${CORES:-2}"
models="${MODELS:-model_dense,model_mod}"
data=/usr/share/games/fortunes/fortunes
modc="$build/bin/modc"; modrun="$build/runtime/modrun"
me=run_distributed.sh
for f in "$modc" "$modrun"; do
  [[ -x "$f" ]] || { echo "$me: $f not found; build modc and modrun" >&2; exit 1; }
done
[[ -f "$build/runtime/libmodrt_mpi.so" ]] ||
  { echo "$me: $build/runtime/libmodrt_mpi.so not found (MPI not found at configure time?)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "$me: mpirun not found" >&2; exit 1; }
[[ -f "$data" ]] || { echo "$me: $data not found (apt-get install fortunes)" >&2; exit 1; }
(( steps > warmup )) || { echo "$me: STEPS must exceed WARMUP" >&2; exit 1; }
(( cores >= 2 && cores % 2 == 0 )) || { echo "$me: CORES must be even and >= 2" >&2; exit 1; }

if [[ -n "${KEEP:-}" ]]; then
  work="$KEEP"; mkdir -p "$work"
else
  work="$(mktemp -d /tmp/run_distributed.XXXXXX)"
  trap 'rm -rf "$work"' EXIT
fi
# Loopback only, as root if need be (as the lit tests run mpirun).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo \
  OMPI_MCA_oob_tcp_if_include=lo

echo "$me: start $(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2
echo "$me: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(mpirun --version | head -1)" >&2
IFS=, read -ra names <<< "$models"
train_args=(--data "$data" --steps "$steps" --batch "$batch" --lr 1e-3
            --seed 1)
for m in "${names[@]}"; do
  pkg="$work/$m"
  echo "$me: compiling $m" >&2
  "$modc" compile "$here/models/$m.json" --target cpu --march=native -o "$pkg" \
    > "$work/$m.compile.log" 2>&1 ||
    { cat "$work/$m.compile.log" >&2; exit 1; }
  for (( i = 1; i <= repeat; ++i )); do
    echo "$me: $m, run $i: 1 rank x $cores threads" >&2
    OMP_NUM_THREADS="$cores" "$modrun" train "$pkg" "${train_args[@]}" \
      --out "$work/$m-1.st" --log "$work/$m-1-$i.csv" 2> "$work/$m-1-$i.log" ||
      { cat "$work/$m-1-$i.log" >&2; exit 1; }
    echo "$me: $m, run $i: 2 ranks x $((cores / 2)) threads" >&2
    mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS="$((cores / 2))" \
      "$modrun" train "$pkg" "${train_args[@]}" --comm mpi \
      --out "$work/$m-2.st" --log "$work/$m-2-$i.csv" 2> "$work/$m-2-$i.log" ||
      { cat "$work/$m-2-$i.log" >&2; exit 1; }
  done
done
echo "$me: end $(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2

python3 - "$work" "$batch" "$warmup" "$cores" "$repeat" "${names[@]}" <<'EOF'
import csv, json, statistics, sys

work, batch, warmup, cores, repeat = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                      int(sys.argv[4]), int(sys.argv[5]))
names = sys.argv[6:]

def rows(path):
    with open(path) as f:
        r = list(csv.DictReader(f))
    for k in ("comm_s", "comm_bytes"):
        if k not in r[0]:
            sys.exit(f"run_distributed.sh: {path} has no {k} column; rebuild modrun")
    return r

print(f"Global batch {batch}; medians over steps {warmup + 1}.. of {repeat} "
      f"run(s) each; {cores} cores in all (1 rank: OMP_NUM_THREADS={cores}; "
      f"2 ranks: OMP_NUM_THREADS={cores // 2} each).")
print()
print("| model | ranks | step (s) | tokens/s (global) | comm (s) | comm share of step "
      "| gradient bytes reduced per rank per step | speed-up vs 1 rank |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name in names:
    with open(f"{work}/{name}/manifest.json") as f:
        seq = json.load(f)["model"]["seq_len"]
    tokens = batch * seq
    base = None
    for ranks in (1, 2):
        r = []
        for i in range(1, repeat + 1):
            every = rows(f"{work}/{name}-{ranks}-{i}.csv")
            # One run's losses against the other's: the same training, summed
            # in another order (docs/distributed.md), so close but not equal.
            print(f"run_distributed.sh: {name}, {ranks} rank(s), run {i}: loss at "
                  f"step 1 {every[0]['loss']}, at step {every[-1]['step']} "
                  f"{every[-1]['loss']}", file=sys.stderr)
            r += every[warmup:]
        step = [tokens / float(x["tokens_per_s"]) for x in r]
        comm = [float(x["comm_s"]) for x in r]
        share = [c / s for c, s in zip(comm, step)]
        nbytes = sorted({int(x["comm_bytes"]) for x in r})
        med = statistics.median(step)
        tps = tokens / med
        if base is None:
            base = tps
        print(f"| {name} | {ranks} | {med:.3f} | {tps:.0f} | "
              f"{statistics.median(comm):.3f} | {100 * statistics.median(share):.1f} % | "
              f"{','.join(f'{b:,}' for b in nbytes)} | {tps / base:.2f} |")
EOF
