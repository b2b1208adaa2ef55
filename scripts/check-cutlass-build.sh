#!/usr/bin/env bash
# Builds one CUTLASS kernel that modc generates for --cuda-gemms=cutlass and
# checks it, without a GPU (docs/cuda.md, "CUTLASS"): nvcc compiles it for
# $ARCH (compile only, -DNDEBUG), ptxas must report no spills, and, where
# cuobjdump is found, its SASS must hold HGMMA (wgmma, sm_90a) or HMMA
# (mma.sync, sm_80). By hand, not in CI: one kernel takes about a minute of
# nvcc on 2 cores.
#
#   scripts/check-cutlass-build.sh [KERNEL] [MODEL.json]
#
# KERNEL: the index of the kernel type in the package (default 5: the
# bf16 example's 128x128x64 cooperative kernel of a residual add, in
# clusters of 2x1, its epilogue tree reading y; 4 is its 64x128x64
# pingpong kernel, 0, 1, 6 and 7 the plain f32 products' kernels, 2 and 3
# V's bf16 store, 8 to 10 SwiGLU's epilogue trees, 11 the causal
# predictor's f32 product (tf32x3: CUTLASS 2.x's kernel on sm_90a too),
# 12 and 13 the routed layers' gated scatters, 14 and 15 the training
# entry's residual adds into another buffer, 16 to 24 the training
# entry's gradients: the input gradients' and, in 18, 21 and 24, the
# weight gradients' that split their rows; 25 the predictor's weight
# gradient; 26 to 29 the one-member grouped launches over rows the device
# counts, for epilogues that must not pass the count: the gated scatters
# and residual adds in place in causal mode and in decode). ARCH: sm_90a
# (the default) or sm_80, whose kernels in the bf16 example are CUTLASS
# 2.x epilogue visitor trees in 2 and 3 (V's bf16 store, 64x128x32 and
# 128x128x32), 4 and 5 (the residual adds in place), 8 and 9 (SwiGLU,
# 64x128x32 along N and 128x256x32) and 15 and 16 (the training entry's
# residual adds into another buffer), the predictor's tf32x3 kernel in
# 10, the gated scatters' trees in 11 to 14 (the forward's, the decode
# step's), plain f32 stores in 0 (64x128x32: the queries and keys, staged
# for RoPE), 1 (128x128x32), 6 (64x128x32 along N) and 7 (128x256x32),
# the input gradients' kernels in 17, 18, 20, 21, 23 and 24 (23 and 24
# add to dA), the weight gradients' split kernels (serial split-K) in 19
# and 22, and the predictor's in 25; a GELU model's trees are its own
# (docs/cuda.md). An f32 model's kernels (examples/tiny-mod.json) are
# CUTLASS 2.x's tf32x3 ones on both parts, all on the 64x128x16 tile: 0
# and 2 its plain stores, 1 a residual add in place, 3 SwiGLU's tree, 4
# and 5 the gated scatters, 7, 9 and 12 input gradients, 8, 10 and 11
# weight gradients' splits. CUDA_GEMMS (default "cutlass") is passed to
# --cuda-gemms: "cutlass sm-count=8" gives the example's weight gradients
# CUTLASS kernels too (docs/cuda.md; on sm_80 the MLP's unsplit ones, 22
# and 23); with it the integrated MoDE example in bf16 has its experts'
# gradient groups' grouped kernels in 23 to 30 (on sm_80 CUTLASS 2.x's
# grouped GEMM: 19 to 24; without it sm_80's weight gradients' group
# splits, in 21). Needs build/bin/modc and mod-translate, nvcc, and
# CUTLASS's headers (scripts/install-deps.sh). cuobjdump: the CUDA
# Toolkit's, on PATH, or the pinned copy of scripts/install-deps.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kernel=${1:-5}
model=${2:-$root/examples/tiny-mod-bf16.json}
bin=$root/build/bin
arch=${ARCH:-sm_90a}
case $arch in
  sm_90a) gencode=arch=compute_90a,code=sm_90a mma=HGMMA ;;
  sm_80) gencode=arch=compute_80,code=sm_80 mma=HMMA ;;
  *) echo "check-cutlass-build: ARCH=$arch: expected sm_90a or sm_80" >&2; exit 2 ;;
esac
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cutlass=${MODC_CUTLASS_INCLUDE_DIR:-/opt/modc-cutlass-4.2.0.0/cutlass_library/source/include}
[ -f "$cutlass/cutlass/version.h" ] || {
  echo "check-cutlass-build: no CUTLASS headers at $cutlass (scripts/install-deps.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/modc" compile "$model" --target cuda --arch "$arch" --cuda-gemms="${CUDA_GEMMS:-cutlass}" --emit=modk > "$work/model.mlir"
"$bin/mod-translate" --modk-cutlass-kernel-to-cuda --cuda-arch="$arch" --cutlass-kernel="$kernel" "$work/model.mlir" > "$work/kernel.cu"
grep '^// #modk.gemm_config' "$work/kernel.cu"
# An f32 product's kernel (tf32x3) is CUTLASS 2.x's on either part: mma.sync.
if grep -q '^// #modk.gemm_config.* tf32x3 ' "$work/kernel.cu"; then mma=HMMA; fi
start=$(date +%s)
if ! "$nvcc" -std=c++17 -O3 -DNDEBUG -gencode=$gencode --expt-relaxed-constexpr \
  -I"$cutlass" -I"$cutlass/../tools/util/include" -Xptxas -v -c "$work/kernel.cu" -o "$work/kernel.o" \
  2> "$work/ptxas.txt"; then
  grep -v '^ptxas info' "$work/ptxas.txt" >&2
  echo "check-cutlass-build: FAILED: nvcc did not build the kernel" >&2; exit 1
fi
echo "check-cutlass-build: nvcc took $(( $(date +%s) - start )) s"
grep -E 'Used [0-9]+ registers|spill' "$work/ptxas.txt" | grep -v 'Compile time'
if grep -E 'spill (stores|loads)' "$work/ptxas.txt" | grep -vq ' 0 bytes spill stores, 0 bytes spill loads'; then
  echo "check-cutlass-build: FAILED: the kernel spills" >&2; exit 1
fi
cuobjdump=$(command -v cuobjdump || echo "$(dirname "$nvcc")/cuobjdump")
[ -x "$cuobjdump" ] || cuobjdump=$(ls /opt/modc-cuda-sass-*/nvidia/cu13/bin/cuobjdump 2>/dev/null | tail -n 1)
if [ -n "$cuobjdump" ] && [ -x "$cuobjdump" ]; then
  "$cuobjdump" -sass "$work/kernel.o" > "$work/kernel.sass"
  # Every kernel of the file but a grouped kernel's setup kernel (it only
  # writes the members' problems and pointers) and a split group's sum of
  # its partials holds the MMA.
  python3 "$root/scripts/check-sass.py" "$work/kernel.sass" \
    --require "^(?!.*(groupSetupKernel|splitSumKernelGroup)).*cutlass=$mma" || {
    echo "check-cutlass-build: FAILED: a kernel without $mma in the SASS" >&2; exit 1; }
else
  echo "check-cutlass-build: no cuobjdump: SASS not checked"
fi
echo "check-cutlass-build: passed"
