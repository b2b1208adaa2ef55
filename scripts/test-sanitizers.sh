#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ (-DMODC_SANITIZE=ON: the packages its modc compiles are
# sanitized too) and runs the runtime, numerics and CLI tests under them.
# The kernel and CUDA-emulation tests, whose cost under ASan is large and
# whose code the numerics tests also run through packages, are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMODC_SANITIZE=ON
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" \
  -E '^(CpuKernels|Cuda|TensorCores|Emulation|cuda_emu|kernel_tests|install$)' "$@"
