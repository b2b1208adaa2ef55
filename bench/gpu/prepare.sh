#!/usr/bin/env bash
#===- prepare.sh - build everything the GPU benchmark needs, here ---------===#
#
# Runs on the machine that has modc (MLIR) and nvcc but no GPU. Compiles
# every model of bench/gpu/models into a CUDA package (sm_90a, for the H100
# or H200) under BUILD_DIR/bench/gpu-packages, builds bench_gpu
# (BUILD_DIR/bench/gpu/bench_gpu), and copies the nlohmann/json headers
# beside the packages so that run.sh can rebuild bench_gpu on the GPU
# machine if the carried binary does not start there.
#
# Usage: bench/gpu/prepare.sh [BUILD_DIR]      (default: build)
# Environment: ARCH (sm_90a), MODELS ("gpu_mod_d1024,..." subset)
#
# Afterwards carry BUILD_DIR/bench/gpu-packages and BUILD_DIR/bench/gpu to
# the GPU machine and run bench/gpu/run.sh BUILD_DIR there (README.md).
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
arch="${ARCH:-sm_90a}"
modc="$build/bin/modc"
out="$build/bench/gpu-packages"

if [[ ! -x "$modc" ]]; then
  echo "prepare.sh: $modc not found; build modc first (cd $build && ninja modc)" >&2
  exit 1
fi
mkdir -p "$out"

models=()
if [[ -n "${MODELS:-}" ]]; then
  IFS=, read -ra models <<< "$MODELS"
else
  for f in "$here"/models/*.json; do models+=("$(basename "$f" .json)"); done
fi

failed=0
for m in "${models[@]}"; do
  src="$here/models/$m.json"
  pkg="$out/$m"
  t0=$(date +%s)
  if "$modc" compile "$src" --target cuda --arch "$arch" -o "$pkg" \
       > "$out/$m.log" 2>&1; then
    echo "prepare.sh: $m -> $pkg ($(( $(date +%s) - t0 )) s)"
    rm -f "$out/$m.log"
  else
    echo "prepare.sh: modc failed for $m (log: $out/$m.log):" >&2
    tail -20 "$out/$m.log" >&2
    failed=1
  fi
done

# Headers for a rebuild of bench_gpu on the GPU machine (run.sh's fallback).
nl="$(echo '#include <nlohmann/json.hpp>' | ${CXX:-c++} -x c++ -E -H - 2>&1 >/dev/null |
      grep -m1 -o '/[^ ]*nlohmann/json.hpp' || true)"
if [[ -n "$nl" ]]; then
  mkdir -p "$out/include"
  rm -rf "$out/include/nlohmann"
  cp -r "$(dirname "$nl")" "$out/include/nlohmann"
fi

if [[ -f "$build/build.ninja" || -f "$build/Makefile" ]]; then
  if cmake --build "$build" --target bench_gpu > "$out/bench_gpu-build.log" 2>&1; then
    echo "prepare.sh: built $build/bench/gpu/bench_gpu"
    rm -f "$out/bench_gpu-build.log"
  else
    echo "prepare.sh: bench_gpu did not build (CUDAToolkit not found by CMake?);" \
         "see $out/bench_gpu-build.log; run.sh will build it on the GPU machine" >&2
  fi
fi

echo "prepare.sh: carry (relative to the repository root):"
for p in "$out" "$build/bench/gpu"; do
  [[ -e "$p" ]] && echo "  $(realpath --relative-to="$(cd "$here/../.." && pwd)" "$p")  $(du -sh "$p" | cut -f1)"
done
exit $failed
