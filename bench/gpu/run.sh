#!/usr/bin/env bash
#===- run.sh - the GPU benchmark, one command on the GPU machine ----------===#
#
# Compiles nothing: bench/gpu/prepare.sh BUILD_DIR, run beforehand where modc
# is, put the CUDA packages (f32: gpu_KIND_dD, bf16: gpu_KIND_dD_bf16) in
# BUILD_DIR/bench/gpu-packages and bench_gpu in BUILD_DIR/bench/gpu. This
# script times the packages of each dtype of DTYPES with bench_gpu, profiles
# the MoD packages kernel by kernel, then the PyTorch baselines (torch_gpu.py:
# cuBLAS alone at the shapes of our gathered GEMMs, eager, CUDA graphs for
# decode, then torch.compile while the time budget lasts), and prints the
# side-by-side tables of report.py (which reads the profiles too). Raw JSON
# lines, the profiles, the log and a markdown report go to $OUT (when set)
# or to a fresh folder under /tmp.
#
# Usage: bench/gpu/run.sh [BUILD_DIR]          (default: build)
# Environment: BUDGET_S (450: whole run, seconds), BATCH (8), ITERS (10),
#   WARMUP (2), DECODE_ITERS (100), MAX_SECONDS (8: cap of each of our
#   measurements, fewer iterations when slower), DTYPES (bf16,f32: both
#   ours and PyTorch's), D_MODELS (1024,2048), TORCH=0 to skip PyTorch,
#   TORCH_COMPILE=0 to skip torch.compile, MODE_COMPARE=0 to skip the MoDE
#   sublayer (gpu_moe_* packages and torch_mode.py), DECODE_BATCHES (1,64:
#   the bf16 decode step of the 0-layer, dense and MoD models at these
#   batches too, ours and PyTorch's; empty to skip), MODE_D_MODELS (1024:
#   its widths), PROFILE=0 to skip the per-kernel profile of our MoD
#   packages, FUSION_COMPARE=0 to skip timing the packages compiled with
#   fusions left out (all of them, and each alone), WGMMA_COMPARE=0 to
#   skip timing the bf16 sm_90a packages a
#   package twins prepare.sh compiled on mma.sync (--cuda-gemms='path=mma')
#   and on wgmma without TMA ('tma=false'), TORCH_ARGS (extra torch_gpu.py
#   arguments). For a dry run of the whole pipeline without a GPU (README.md):
#   BENCH_GPU (a bench_gpu built with -DBENCH_GPU_HOST_TIMER), TORCH_DEVICE=cpu
#   and TORCH_ARGS=--tiny.
#
#===-----------------------------------------------------------------------===#
set -uo pipefail
t_start=$(date +%s)
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$(cd "${1:-build}" 2>/dev/null && pwd)" || {
  echo "run.sh: build directory ${1:-build} not found" >&2; exit 1; }
packages="$build/bench/gpu-packages"
bench="${BENCH_GPU:-$build/bench/gpu/bench_gpu}"
torch_device="${TORCH_DEVICE:-cuda}"
budget="${BUDGET_S:-450}"
batch="${BATCH:-8}"; iters="${ITERS:-10}"; warmup="${WARMUP:-2}"
decode_iters="${DECODE_ITERS:-100}"; max_s="${MAX_SECONDS:-8}"
dtypes="${DTYPES:-bf16,f32}"; d_models="${D_MODELS:-1024,2048}"
outdir="${OUT:-$(mktemp -d /tmp/gpu-bench.XXXXXX)}"
mkdir -p "$outdir"
raw="$outdir/gpu_bench.jsonl"
logf="$outdir/gpu_bench.log"
: > "$raw"
: > "$logf"
elapsed() { echo $(( $(date +%s) - t_start )); }
say() { echo "[run.sh $(elapsed)s] $*" | tee -a "$logf" >&2; }

if [[ ! -d "$packages" ]]; then
  echo "run.sh: $packages not found: run bench/gpu/prepare.sh $build on the" \
       "build machine and carry $packages and $build/bench/gpu" >&2
  exit 1
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: bench/gpu/run.sh $*  (BATCH=$batch DECODE_BATCHES=${DECODE_BATCHES-1,64} ITERS=$iters MAX_SECONDS=$max_s WARMUP=$warmup DECODE_ITERS=$decode_iters DTYPES=$dtypes D_MODELS=$d_models BUDGET_S=$budget)"
  # The packages' commit, as prepare.sh recorded it (this tree's checkout
  # may be another commit's copy).
  echo "packages built from: $(cat "$packages/BUILT_FROM" 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 || true
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)" 2>&1 || true
} | tee -a "$logf" > "$outdir/header.txt"
cat "$outdir/header.txt"

# bench_gpu was built on another machine; rebuild it here if it does not start.
if ! "$bench" --help > /dev/null 2>&1; then
  say "bench_gpu does not start here ($bench); rebuilding it with the local CUDA"
  cuda="${CUDA_HOME:-/usr/local/cuda}"
  bench=/tmp/bench_gpu
  if ! ${CXX:-g++} -std=c++17 -O2 -I"$root/runtime/include" -I"$packages/include" \
         -I"$cuda/include" "$here/bench_gpu.cpp" -o "$bench" \
         -L"$cuda/lib64" -L"$cuda/lib" -lcudart_static -ldl -lpthread -lrt \
         >> "$logf" 2>&1; then
    say "rebuilding bench_gpu failed (see $logf); only PyTorch will be timed"
    bench=""
  fi
fi

# 1. Ours: every package of each dtype asked for (f32: gpu_KIND_dD, bf16:
#    gpu_KIND_dD_bf16; each JSON line's dtype comes from the package).
IFS=, read -ra ds <<< "$d_models"
IFS=, read -ra dts <<< "$dtypes"
pkg_suffix() {  # the package name's suffix for a dtype
  case "$1" in f32) echo "" ;; bf16) echo "_bf16" ;; *) return 1 ;; esac
}
decode_batches="${DECODE_BATCHES-1,64}"
# Times package $1 with bench_gpu and its further options, at batch
# $pkg_batch (default: BATCH).
time_package() {
  local pkg=$1
  shift
  if [[ ! -f "$pkg/libmodel.so" ]]; then
    say "missing package $pkg (prepare.sh)"; return 0
  fi
  local b="${pkg_batch:-$batch}"
  say "bench_gpu $(basename "$pkg")$([[ $b == "$batch" ]] || echo " (batch $b)")"
  timeout 120 "$bench" "$pkg" --batch "$b" --iters "$iters" \
    --warmup "$warmup" --max-seconds "$max_s" "$@" >> "$raw" 2>> "$logf" ||
    say "bench_gpu failed on $pkg (rc $?): $(tail -1 "$logf")"
}
if [[ -n "$bench" ]]; then
  for dt in "${dts[@]}"; do
    sfx="$(pkg_suffix "$dt")" || { say "no packages for dtype $dt (f32, bf16)"; continue; }
    for d in "${ds[@]}"; do
      for kind in none dense mod; do
        time_package "$packages/gpu_${kind}_d${d}${sfx}" --decode-iters "$decode_iters"
      done
    done
  done
  # The decode targets' batches (bf16): each model's decode step alone.
  if [[ -n "$decode_batches" && ",$dtypes," == *,bf16,* ]]; then
    IFS=, read -ra dbs <<< "$decode_batches"
    for d in "${ds[@]}"; do
      for pkg_batch in "${dbs[@]}"; do
        [[ "$pkg_batch" == "$batch" ]] && continue
        for kind in none dense mod; do
          time_package "$packages/gpu_${kind}_d${d}_bf16" --only decode \
            --decode-iters "$decode_iters"
        done
      done
    done
    pkg_batch=""
  fi
  # MoDE (docs/model-format.md section 7): the 1-layer model whose MLP is
  # an MoE with no-op experts (gpu_moe_mode), the same with none
  # (gpu_moe_n0) and with a width-1 dense MLP (gpu_moe_stub), bf16, so that
  # report.py can take each MoE sublayer as a model minus the stub.
  if [[ "${MODE_COMPARE:-1}" != 0 && ",$dtypes," == *,bf16,* ]]; then
    IFS=, read -ra mode_ds <<< "${MODE_D_MODELS:-1024}"
    for d in "${mode_ds[@]}"; do
      for kind in mode n0 stub; do
        time_package "$packages/gpu_moe_${kind}_d${d}_bf16" --kind "moe_$kind" \
          --only forward,fwd_bwd
      done
    done
  fi
  # A package compiled with other choices, timed forward and
  # forward+backward (or the passes in $3), its lines labelled
  # `modc_SUFFIX`.
  time_twin() {
    local pkg=$1 suffix=$2 only=${3:-forward,fwd_bwd}
    [[ -f "$pkg/libmodel.so" ]] || return 0
    say "bench_gpu $(basename "$pkg") (modc_$suffix)"
    timeout 120 "$bench" "$pkg" --batch "$batch" --impl "modc_$suffix" \
      --iters "$iters" --warmup "$warmup" --max-seconds "$max_s" \
      --only "$only" --decode-iters "$decode_iters" >> "$raw" 2>> "$logf" ||
      say "bench_gpu ($suffix) failed on $pkg (rc $?): $(tail -1 "$logf")"
  }
  # The bf16 products of sm_90a packages on mma.sync instead of wgmma
  # (compiled with --cuda-gemms='path=mma'; "modc_mma" lines), on wgmma
  # without TMA ('tma=false'; "modc_notma"), the selection's fused
  # gather on one block a sequence ('gather-blocks=1'; "modc_gather1"),
  # and on CUTLASS's kernels (--cuda-gemms=cutlass; "modc_cutlass"):
  # the 0-layer and the MoD model.
  if [[ ",$dtypes," == *,bf16,* && "${WGMMA_COMPARE:-1}" != 0 ]]; then
    for d in "${ds[@]}"; do
      for kind in none mod; do
        for suffix in mma notma gather1; do
          time_twin "$packages/gpu_${kind}_d${d}_bf16_$suffix" "$suffix"
        done
        # CUTLASS's packages also take the whole-model training step, the
        # default the hardware pass may switch to.
        time_twin "$packages/gpu_${kind}_d${d}_bf16_cutlass" cutlass \
          forward,fwd_bwd,train
        # The few-row products on the tile kernels ('stream-rows=0';
        # "modc_stream0"): the decode step.
        time_twin "$packages/gpu_${kind}_d${d}_bf16_stream0" stream0 decode
      done
      # The forward attention on TMA and wgmma ('tiles attention=wgmma';
      # "modc_attnwg"): the 0-layer, MoD and dense models.
      for kind in none mod dense; do
        time_twin "$packages/gpu_${kind}_d${d}_bf16_attnwg" attnwg
      done
    done
  fi
  # Every fusion left out (compiled with --no-fuse=residual-add,
  # activation,rows-epilogue,router-norm,select-gather,copy; "modc_nofuse"
  # lines): the 0-layer and the MoD
  # model of each dtype, so that report.py can set the MoD block's time
  # with the fusions against without.
  if [[ "${FUSION_COMPARE:-1}" != 0 ]]; then
    for dt in "${dts[@]}"; do
      sfx="$(pkg_suffix "$dt")" || continue
      for d in "${ds[@]}"; do
        for kind in none mod; do
          time_twin "$packages/gpu_${kind}_d${d}${sfx}_nofuse" nofuse
        done
      done
    done
  fi
  # Each fusion left out alone (prepare.sh's FUSIONS: the bf16 MoD model
  # compiled with --no-fuse=FUSION; "modc_no-FUSION" lines, whole model,
  # every pass), so that report.py can give each fusion's effect.
  if [[ "${FUSION_COMPARE:-1}" != 0 && ",$dtypes," == *,bf16,* ]]; then
    for d in "${ds[@]}"; do
      for pkg in "$packages/gpu_mod_d${d}_bf16_no-"*; do
        [[ -d "$pkg" ]] || continue
        time_twin "$pkg" "no-${pkg##*_bf16_no-}" forward,fwd_bwd,decode
      done
    done
  fi
  # Where our time goes: MODC_PROFILE=1 makes the package wait after every
  # kernel and print its time (a warm-up pass, then one timed pass, then a
  # prefill and two decode steps, outside their CUDA graph; these timings
  # include a host wait per kernel and are not the table's).
  # report.py takes the gathered GEMMs' rates and routing's share of the
  # block from the forward pass of these files.
  if [[ "${PROFILE:-1}" != 0 ]]; then
    for dt in "${dts[@]}"; do
      sfx="$(pkg_suffix "$dt")" || continue
      for d in "${ds[@]}"; do
        pkg="$packages/gpu_mod_d${d}${sfx}"
        [[ -f "$pkg/libmodel.so" ]] || continue
        prof="profile_mod_d${d}${sfx}.txt"
        say "per-kernel profile of $(basename "$pkg") -> $prof"
        MODC_PROFILE=1 timeout 60 "$bench" "$pkg" --batch "$batch" --iters 1 \
          --warmup 1 --decode-iters 2 --only forward,fwd_bwd,decode > /dev/null \
          2> "$outdir/$prof" || say "profile failed (rc $?)"
      done
    done
  fi
fi

# 2. PyTorch: eager first, torch.compile last, inside what is left.
left=$(( budget - $(elapsed) - 20 ))
if [[ "${TORCH:-1}" == 0 ]]; then
  say "TORCH=0: no PyTorch baseline"
elif [[ "$torch_device" == cpu ]] ||
   python3 -c "import torch; assert torch.cuda.is_available()" 2>> "$logf"; then
  compile_flag=()
  [[ "${TORCH_COMPILE:-1}" == 0 ]] && compile_flag=(--no-compile)
  # The MoDE sublayer in PyTorch (bench/torch_mode.py: eager and
  # torch.compile, two formulations), bf16, at most a quarter of what is
  # left.
  if [[ "${MODE_COMPARE:-1}" != 0 && ",$dtypes," == *,bf16,* ]]; then
    IFS=, read -ra mode_ds <<< "${MODE_D_MODELS:-1024}"
    for d in "${mode_ds[@]}"; do
      model="$here/models/gpu_moe_mode_d${d}.json"
      [[ -f "$model" ]] || model="$packages/models/gpu_moe_mode_d${d}_bf16.json"
      [[ -f "$model" ]] || { say "no MoDE model for d $d"; continue; }
      say "torch_mode.py $(basename "$model")"
      PYTHONUNBUFFERED=1 timeout "$(( left / 4 > 30 ? left / 4 : 30 ))" \
        python3 "$root/bench/torch_mode.py" "$model" --device "$torch_device" \
        --dtype bf16 --batch "$batch" --iters "$iters" --warmup "$warmup" \
        "${compile_flag[@]}" 2>> "$logf" | grep '^{' >> "$raw" ||
        say "torch_mode.py stopped (rc $?); the tables show what it measured"
    done
    left=$(( budget - $(elapsed) - 20 ))
  fi
  say "torch_gpu.py (${left}s left)"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout "$(( left > 30 ? left : 30 ))" \
    python3 "$here/torch_gpu.py" --device "$torch_device" --dtypes "$dtypes" \
    --d-models "$d_models" --batch "$batch" --iters "$iters" \
    --warmup "$warmup" --decode-iters "$decode_iters" \
    --decode-batches "$decode_batches" \
    --deadline "$(( left > 60 ? left - 10 : 50 ))" "${compile_flag[@]}" \
    ${TORCH_ARGS:-} >> "$raw" 2> >(tee -a "$logf" >&2) ||
    say "torch_gpu.py stopped (rc $?); the tables show what it measured"
else
  say "PyTorch with CUDA not available: no baseline"
fi

# 3. The tables.
say "done; raw results in $raw"
{
  title="modc vs PyTorch, each in ${dtypes//,/ and }"
  [[ ",$dtypes," == *,bf16,* ]] && title+=" (ours in bf16: bf16 products, f32 buffers)"
  echo "## GPU benchmark: $title"
  echo
  sed 's/^/    /' "$outdir/header.txt"
  echo
  python3 "$here/report.py" "$raw" --profiles "$outdir" --batch "$batch"
} > "$outdir/report.md" 2>> "$logf"
cat "$outdir/report.md"
echo
echo "run.sh: $(elapsed) s; files in $outdir: gpu_bench.jsonl (raw), report.md, gpu_bench.log"
