#!/usr/bin/env bash
#===- gpu-check.sh - the GPU tests and the GPU benchmark in one call -------===#
#
# A GPU machine is lent for minutes and has no MLIR, so everything is built
# here and one archive folder travels. Two steps:
#
#   here:   test/gpu/prepare.sh build && bench/gpu/prepare.sh build &&
#           scripts/gpu-check.sh pack          # -> gpu-carry/ (~45 MB)
#   there:  scripts/gpu-check.sh run           # carrying gpu-carry/
#
# `run` unpacks, prints the device, runs the tensor-core checks
# (test/gpu/tensor_core_check.cu), the CUDA-vs-CPU package tests
# (test/gpu/CudaVsCpuTest.cpp) and then the benchmark (bench/gpu/run.sh),
# each under a time limit, and leaves in $OUT: tests.log, the benchmark's
# report.md and everything else as gpu-check.tar.gz.
# Environment (run): TEST_TIMEOUT_S (200), GTEST_FILTER, BENCH=0 to skip the
#   benchmark; the benchmark's own variables (BUDGET_S, D_MODELS, DTYPES, ...)
#   pass through (bench/gpu/README.md).
#
#===-----------------------------------------------------------------------===#
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
carry="$root/gpu-carry"
cd "$root"

case "${1:-}" in
pack)
  set -e
  [[ -f build/test/gpu/prebuilt.tar.gz ]] ||
    { echo "gpu-check.sh: run test/gpu/prepare.sh build first" >&2; exit 1; }
  [[ -x build/bench/gpu/bench_gpu ]] ||
    { echo "gpu-check.sh: run bench/gpu/prepare.sh build first" >&2; exit 1; }
  rm -rf "$carry"
  mkdir -p "$carry"
  cp build/test/gpu/prebuilt.tar.gz "$carry/test-prebuilt.tar.gz"
  cp build/test/gpu/gpu_tests "$carry/"
  # The packages' sources and reports are not needed to run them.
  tar -czf "$carry/bench-packages.tar.gz" -C build/bench --exclude='*.cu' \
    --exclude='*.mlir' --exclude='ptxas-report.txt' gpu-packages gpu
  echo "gpu-check.sh: $(du -sh "$carry" | cut -f1) in $carry; ignore it in" \
       ".git/info/exclude and carry it (scripts/gpu-check.sh run there)"
  ;;
run)
  out="${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
  work="$(mktemp -d /tmp/gpu-check-work.XXXXXX)"
  log="$out/tests.log"
  mkdir -p build/test/gpu build/bench
  tar -xzf "$carry/test-prebuilt.tar.gz" -C build/test/gpu || exit 1
  cp "$carry/gpu_tests" build/test/gpu/
  tar -xzf "$carry/bench-packages.tar.gz" -C build/bench || exit 1
  {
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
      --format=csv 2>&1
    nproc
  } | tee "$log"
  pre=build/test/gpu/prebuilt
  echo "== tensor_core_check" | tee -a "$log"
  timeout 60 "$pre/tensor_core_check" 2>&1 | tee -a "$log"
  echo "tensor_core_check rc ${PIPESTATUS[0]}" | tee -a "$log"
  echo "== gpu_tests" | tee -a "$log"
  LD_LIBRARY_PATH="$pre/lib" MODC_GPU_TEST_PACKAGES="$pre" \
    timeout "${TEST_TIMEOUT_S:-200}" build/test/gpu/gpu_tests \
    --gtest_filter="${GTEST_FILTER:-*}" 2>&1 | tee -a "$log" |
    grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|error|Expected|Which is|differ' | head -150
  echo "gpu_tests rc ${PIPESTATUS[0]}" | tee -a "$log"
  if [[ "${BENCH:-1}" != 0 ]]; then
    echo "== bench/gpu/run.sh" | tee -a "$log"
    OUT="$work" bench/gpu/run.sh build > "$work/run.out" 2>&1
    echo "bench rc $?" | tee -a "$log"
    cp "$work/report.md" "$out/" 2>/dev/null
    tail -c 6000 "$work/run.out"
  fi
  tar -czf "$out/gpu-check.tar.gz" -C "$work" . 2>/dev/null
  ;;
*)
  echo "usage: scripts/gpu-check.sh pack|run (see the header)" >&2
  exit 2
  ;;
esac
