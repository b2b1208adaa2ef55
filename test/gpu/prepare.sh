#!/usr/bin/env bash
#===- prepare.sh - Packages of gpu_tests for a machine without modc -------===#
#
# A GPU machine may have no MLIR, so modc cannot run there. This compiles,
# here, every package gpu_tests uses (CPU packages for any x86-64-v3 machine,
# CUDA packages for sm_90a and sm_80, emulated ones) into
# BUILD/test/gpu/prebuilt, with the shared libraries the CPU packages load
# (OpenBLAS and its runtime) and tensor_core_check (the tensor-core checks
# of test/cuda_emu/TensorCoreChecks.h on the GPU itself, built by nvcc),
# archives them (BUILD/test/gpu/prebuilt.tar.xz) and prints the command to
# run there.
#
# Usage: test/gpu/prepare.sh [BUILD_DIR]     (default: build)
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
build="${1:-build}"
tests="$build/test/gpu/gpu_tests"
if [[ ! -x "$tests" ]]; then
  echo "prepare.sh: $tests not found; build the gpu_tests target first" >&2
  exit 1
fi
out="$build/test/gpu/prebuilt"
# The CUTLASS kernels' objects (the --cuda-gemms=cutlass variants) in the
# build directory, which outlives a machine's home: compiled once.
export MODC_CACHE_DIR="${MODC_CACHE_DIR:-$(cd "$build" && pwd)/modc-kernel-cache}"
rm -rf "$out"
mkdir -p "$out/lib"
# Every variant's SetUp compiles its packages; one test per variant is enough.
MODC_GPU_TEST_PACKAGES="$out" MODC_GPU_TEST_PREPARE=1 \
  "$tests" --gtest_filter='*ForwardMatchesInBothModes*' > "$out/prepare.log" 2>&1 || {
  echo "prepare.sh: compiling the packages failed; see $out/prepare.log" >&2
  exit 1
}
# The CPU packages link the OpenMP build of OpenBLAS: carry it and its runtime.
for so in "$out"/*-cpu/libmodel.so; do
  ldd "$so" | awk '/=> \// {print $3}'
done | sort -u | grep -E 'openblas|gfortran|quadmath|gomp' | xargs -r cp -L -t "$out/lib"
# The tensor-core checks on the GPU itself (test/gpu/tensor_core_check.cu).
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if "$nvcc" -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a \
     -DMODC_CUDA_WGMMA=1 -I"$root/compiler/lib/Target/Cuda/prelude" \
     -I"$root/compiler/lib/Target/Mainloops/Cuda" \
     -I"$root/test/cuda_emu" -I"$root/test/common" -I"$build/test/cuda_emu" \
     "$root/test/gpu/tensor_core_check.cu" \
     -lgtest -lgtest_main -o "$out/tensor_core_check" > "$out/tensor_core_check.log" 2>&1; then
  rm -f "$out/tensor_core_check.log"
else
  echo "prepare.sh: tensor_core_check did not build; see $out/tensor_core_check.log" >&2
  exit 1
fi
# One archive to carry: OpenBLAS alone is 36 MB, and a copy of the working
# tree to the GPU machine holds 64 MiB in all. xz, whose window spans the
# many packages' alike kernels, makes it less than half of gzip's.
archive="$build/test/gpu/prebuilt.tar.xz"
rm -f "$build/test/gpu/prebuilt.tar.gz"
tar -cf - -C "$(dirname "$out")" "$(basename "$out")" | xz -T0 -6 > "$archive"
echo "prepare.sh: packages in $out ($(du -sh "$out" | cut -f1)), archived as $archive ($(du -sh "$archive" | cut -f1)):"
ls "$out"
echo "On the GPU machine, carrying $archive and $tests:"
# Time limits, so that a kernel that hangs costs minutes, not the session.
echo "  tar -xJf $archive -C $(dirname "$out") && timeout 180 $out/tensor_core_check; LD_LIBRARY_PATH=$out/lib MODC_GPU_TEST_PACKAGES=$out timeout 420 $tests"
