#!/usr/bin/env bash
#===- gpu-check.sh - the GPU tests and the GPU benchmark in one call -------===#
#
# A GPU machine is lent for minutes and has no MLIR, so everything is built
# here and one archive folder travels. Two steps:
#
#   here:   test/gpu/prepare.sh build && bench/gpu/prepare.sh build &&
#           scripts/gpu-check.sh pack          # -> gpu-carry/ (xz, ~35 MB)
#   there:  scripts/gpu-check.sh run           # carrying gpu-carry/
#
# `run` unpacks what was carried (test-prebuilt.tar.xz with gpu_tests,
# bench-packages.tar.xz: both, or either where pack said they take two
# calls), prints the device, runs the CUDA-vs-CPU package tests
# (test/gpu/CudaVsCpuTest.cpp, a process for each package variant; on a
# crash that variant again under cuda-gdb, for the backtrace), the tensor-core checks (test/gpu/tensor_core_check.cu) and
# then the benchmark (bench/gpu/run.sh),
# each under a time limit, and leaves in $OUT: tests.log, the benchmark's
# report.md and everything else as gpu-check.tar.gz.
# Environment (run): TESTS=0 to skip the tests (gpu_tests and the
#   tensor-core checks), TEST_TIMEOUT_S (200, gpu_tests' variants in all),
#   GTEST_FILTER (gpu_tests),
#   TC_FILTER (a regex of tensor-core tests), TC_TIMEOUT_S (60 a test),
#   BENCH=0 to skip the benchmark; the benchmark's own variables (BUDGET_S, D_MODELS, DTYPES, ...)
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
  [[ -f build/test/gpu/prebuilt.tar.xz ]] ||
    { echo "gpu-check.sh: run test/gpu/prepare.sh build first" >&2; exit 1; }
  [[ -x build/bench/gpu/bench_gpu ]] ||
    { echo "gpu-check.sh: run bench/gpu/prepare.sh build first" >&2; exit 1; }
  rm -rf "$carry"
  mkdir -p "$carry"
  # prepare.sh's archive (xz: its window spans the packages' alike kernels,
  # so the carry is a third of gzip's).
  cp build/test/gpu/prebuilt.tar.xz "$carry/test-prebuilt.tar.xz"
  cp build/test/gpu/gpu_tests "$carry/"
  # The packages' sources and reports are not needed to run them, nor is
  # what a stopped compile left.
  tar -cf - -C build/bench --exclude='*.cu' --exclude='*.mlir' \
    --exclude='ptxas-report.txt' --exclude='*.tmp-*' --exclude='*.log' \
    gpu-packages gpu | xz -T0 -6 > "$carry/bench-packages.tar.xz"
  # A device call carries at most 64 MiB with the working tree.
  tree_mib=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 |
             awk '{print int($1 / 1048576) + 1}')
  carry_mib=$(du -cb "$carry"/* | tail -1 | awk '{print int($1 / 1048576) + 1}')
  echo "gpu-check.sh: ${carry_mib} MiB in $carry (ignored by git) and" \
       "${tree_mib} MiB of working tree; carry it to the GPU machine and run" \
       "scripts/gpu-check.sh run there"
  if (( carry_mib + tree_mib > 64 )); then
    echo "gpu-check.sh: $carry and the working tree exceed the 64 MiB a" \
         "device call carries; carry test-prebuilt.tar.xz with gpu_tests" \
         "(BENCH=0) and bench-packages.tar.xz (TESTS=0) in two calls" >&2
    exit 1
  fi
  ;;
run)
  out="${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
  work="$(mktemp -d /tmp/gpu-check-work.XXXXXX)"
  log="$out/tests.log"
  mkdir -p build/test/gpu build/bench
  # tar's xz, or Python's lzma where the machine has no xz.
  unpack() {
    [[ -f "$1" ]] || return 0
    tar -xJf "$1" -C "$2" 2> /dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"
  }
  unpack "$carry/test-prebuilt.tar.xz" build/test/gpu || exit 1
  [[ -f "$carry/gpu_tests" ]] && cp "$carry/gpu_tests" build/test/gpu/
  unpack "$carry/bench-packages.tar.xz" build/bench || exit 1
  {
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
      --format=csv 2>&1
    nproc
  } | tee "$log"
  if [[ "${TESTS:-1}" != 0 ]]; then
    pre=build/test/gpu/prebuilt
    echo "== gpu_tests" | tee -a "$log"
    export LD_LIBRARY_PATH="$pre/lib" MODC_GPU_TEST_PACKAGES="$pre"
    # One process a package variant (the tests' parameter: the variant's
    # name ends each test's name), so that a kernel fault, which breaks the
    # CUDA context for the rest of its process, costs that variant alone;
    # all of them within TEST_TIMEOUT_S, the GPU's before the CPU
    # emulation's (CI runs those).
    build/test/gpu/gpu_tests --gtest_list_tests --gtest_filter="${GTEST_FILTER:-*}" |
      awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' > "$work/gpu_tests.list"
    deadline=$((SECONDS + ${TEST_TIMEOUT_S:-200}))
    for variant in $(awk -F/ '{print $NF}' "$work/gpu_tests.list" | sort -u |
                     awk '/emulated/ {e = e $0 "\n"; next} {print} END {printf "%s", e}'); do
      left=$((deadline - SECONDS))
      if ((left < 5)); then
        echo "gpu_tests $variant: not run, out of time" | tee -a "$log"
        continue
      fi
      filter=$(grep "/$variant\$" "$work/gpu_tests.list" | paste -sd: -)
      timeout "$left" build/test/gpu/gpu_tests --gtest_filter="$filter" \
        > "$work/gpu_tests.log" 2>&1
      rc=$?
      cat "$work/gpu_tests.log" >> "$log"
      echo "gpu_tests $variant: rc $rc," \
        "$(grep -cE '^\[       OK \]' "$work/gpu_tests.log") passed," \
        "$(grep -cE '^\[  FAILED  \] .*\(' "$work/gpu_tests.log") failed," \
        "$(grep -cE '^\[  SKIPPED \] .*\(' "$work/gpu_tests.log") skipped" | tee -a "$log"
      grep -E '^\[ *(FAILED|SKIPPED) |Failure|error|Expected|Which is|differ' \
        "$work/gpu_tests.log" | head -20
      # A crash: where, from the same variant under cuda-gdb (it debugs host
      # code too; the driver's JIT cache makes the second run quicker).
      left=$((deadline - SECONDS))
      if [[ $rc -ge 128 && $rc != 137 ]] && ((left >= 10)) &&
         command -v cuda-gdb > /dev/null; then
        echo "== gpu_tests $variant under cuda-gdb" | tee -a "$log"
        timeout "$left" cuda-gdb -batch -ex run -ex bt \
          -ex 'info sharedlibrary' --args build/test/gpu/gpu_tests \
          --gtest_filter="$filter" > "$work/gdb.log" 2>&1
        cat "$work/gdb.log" >> "$log"
        grep -vE '^\[New Thread|^\[Thread .* exited|^\[ ' "$work/gdb.log" | tail -70
      fi
    done
    # Each tensor-core test in a process of its own, so that a kernel that
    # hangs or breaks the context costs that test alone.
    echo "== tensor_core_check" | tee -a "$log"
    for t in $("$pre/tensor_core_check" --gtest_list_tests |
               awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}' |
               grep -E "${TC_FILTER:-.}"); do
      timeout "${TC_TIMEOUT_S:-60}" "$pre/tensor_core_check" --gtest_filter="$t" \
        > "$work/tc.log" 2>&1
      rc=$?
      cat "$work/tc.log" >> "$log"
      echo "tensor_core_check $t: rc $rc ($(grep -cE '^\[  FAILED' "$work/tc.log") failed lines)" |
        tee -a "$log"
      grep -E 'Failure|error|Expected|Which is|differ' "$work/tc.log" | head -8
      # Ended with no failure printed: who ended it, under cuda-gdb.
      if [[ $rc != 0 && $rc != 124 ]] && ! grep -qE '^\[  FAILED' "$work/tc.log" &&
         command -v cuda-gdb > /dev/null; then
        timeout 60 cuda-gdb -batch -ex 'catch syscall exit_group' -ex run -ex bt \
          --args "$pre/tensor_core_check" --gtest_filter="$t" 2>&1 |
          grep -vE '^\[New Thread|^\[Thread .* exited' | tail -40 | tee -a "$log"
      fi
    done
  fi
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
