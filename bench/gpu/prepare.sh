#!/usr/bin/env bash
#===- prepare.sh - build everything the GPU benchmark needs, here ---------===#
#
# Runs on the machine that has modc (MLIR) and nvcc but no GPU. Compiles
# every model of bench/gpu/models into CUDA packages (sm_90a, for the H100
# or H200) under BUILD_DIR/bench/gpu-packages: in f32 (the JSON as it is,
# package NAME) and in bf16 (a twin generated from it with "dtype": "bf16"
# and the name NAME_bf16, written to BUILD_DIR/bench/gpu-packages/models/,
# package NAME_bf16); the 0-layer and MoD models also with every epilogue
# fusion left out (NAME_nofuse, NAME_bf16_nofuse), and the bf16 twin of the
# MoD model FUSION_MODEL with each fusion of FUSIONS left out alone
# (NAME_bf16_no-FUSION). The MoE sublayer's models (gpu_moe_*: MoDE with
# no-op experts, the same with none, and a width-1 dense stub) are built
# in bf16 only. Then
# builds bench_gpu (BUILD_DIR/bench/gpu/bench_gpu)
# and copies the nlohmann/json headers beside the packages so that run.sh
# can rebuild bench_gpu on the GPU machine if the carried binary does not
# start there.
#
# Usage: bench/gpu/prepare.sh [BUILD_DIR]      (default: build)
# Environment: ARCH (sm_90a); DTYPES (f32,bf16: the packages built of each
#   model); MODELS (a subset, "gpu_mod_d1024,gpu_none_d1024_bf16,...": a
#   plain name builds the dtypes of DTYPES, a name ending in _bf16 builds
#   just that bf16 twin); FUSIONS (residual-add,activation,rows-epilogue,
#   router-norm,select-gather,copy: the fusions whose effect run.sh
#   measures one at a time, each a package more; empty: none) and
#   FUSION_MODEL (gpu_mod_d1024: the model they are measured on)
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
# The CUTLASS kernels' objects (the --cuda-gemms=cutlass twins) in the
# build directory, which outlives a machine's home: compiled once.
export MODC_CACHE_DIR="${MODC_CACHE_DIR:-$build/modc-kernel-cache}"
out="$build/bench/gpu-packages"

if [[ ! -x "$modc" ]]; then
  echo "prepare.sh: $modc not found; build modc first (cd $build && ninja modc)" >&2
  exit 1
fi
mkdir -p "$out"
# run.sh's report names the commit the packages were compiled from.
root="$(cd "$here/../.." && pwd)"
{
  git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown
  git -C "$root" diff --quiet HEAD -- 2>/dev/null || echo "(with uncommitted changes)"
} | paste -sd' ' > "$out/BUILT_FROM"

# modc's --no-fuse names; `horizontal` stacks products on CPU targets only.
fusions="${FUSIONS-residual-add,activation,rows-epilogue,router-norm,select-gather,copy}"
IFS=, read -ra each_fusion <<< "$fusions"
fusion_model="${FUSION_MODEL:-gpu_mod_d1024}"

dtypes="${DTYPES:-f32,bf16}"
IFS=, read -ra dts <<< "$dtypes"
for dt in "${dts[@]}"; do
  if [[ "$dt" != f32 && "$dt" != bf16 ]]; then
    echo "prepare.sh: DTYPES: unknown dtype '$dt' (f32, bf16)" >&2
    exit 2
  fi
done

names=()
if [[ -n "${MODELS:-}" ]]; then
  IFS=, read -ra names <<< "$MODELS"
else
  for f in "$here"/models/*.json; do names+=("$(basename "$f" .json)"); done
fi
# What to build: "BASE DTYPE" pairs, BASE naming models/BASE.json.
failed=0
jobs=()
for n in "${names[@]}"; do
  base="${n%_bf16}"
  if [[ ! -f "$here/models/$base.json" ]]; then
    echo "prepare.sh: MODELS: no model $here/models/$base.json (MODELS names" \
         "models/*.json, each optionally with _bf16)" >&2
    failed=1
  elif [[ "$n" == *_bf16 ]]; then
    jobs+=("$base bf16")
  elif [[ "$n" == gpu_moe_* ]]; then
    # The MoE sublayer comparison (run.sh, "MoDE") runs in bf16 only.
    [[ " ${dts[*]} " == *" bf16 "* ]] && jobs+=("$n bf16")
  else
    for dt in "${dts[@]}"; do jobs+=("$n $dt"); done
  fi
done

# The bf16 twin of models/BASE.json: the same model with "dtype": "bf16" and
# the name BASE_bf16 (generated, so that the two cannot drift apart).
bf16_twin() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
src, dst, name = sys.argv[1:]
with open(src) as f:
    m = json.load(f)
m["name"] = name
m["dtype"] = "bf16"
with open(dst, "w") as f:
    json.dump(m, f, indent=2)
    f.write("\n")
EOF
}

# The dtype of the model that a package's manifest describes.
manifest_dtype() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["model"].get("dtype", "f32"))' \
    "$1/manifest.json" 2>/dev/null || echo "?"
}

# The package ${pkg}_SUFFIX: model $src compiled with modc's further
# OPTIONS (a twin of $pkg that run.sh compares with it).
twin() {
  local suffix=$1
  shift
  if ! "$modc" compile "$src" --target cuda --arch "$arch" "$@" \
       -o "${pkg}_$suffix" > "$out/${m}_$suffix.log" 2>&1; then
    echo "prepare.sh: modc failed for ${m}_$suffix (log: $out/${m}_$suffix.log)" >&2
    failed=1
  else
    rm -f "$out/${m}_$suffix.log"
  fi
}

for job in "${jobs[@]}"; do
  read -r base dt <<< "$job"
  src="$here/models/$base.json"
  m="$base"
  if [[ "$dt" == bf16 ]]; then
    m="${base}_bf16"
    mkdir -p "$out/models"
    bf16_twin "$src" "$out/models/$m.json" "$m"
    src="$out/models/$m.json"
  fi
  pkg="$out/$m"
  t0=$(date +%s)
  if "$modc" compile "$src" --target cuda --arch "$arch" -o "$pkg" \
       > "$out/$m.log" 2>&1; then
    got="$(manifest_dtype "$pkg")"
    if [[ "$got" != "$dt" ]]; then
      echo "prepare.sh: $m: its manifest's model says dtype '$got', not '$dt'" >&2
      failed=1
      continue
    fi
    echo "prepare.sh: $m ($dt) -> $pkg ($(( $(date +%s) - t0 )) s)"
    rm -f "$out/$m.log"
    # run.sh's comparisons, for the bf16 sm_90a packages of the 0-layer and
    # the MoD model: the products pinned to mma.sync, to wgmma without
    # TMA, the selection's fused gather on one block a sequence, the
    # few-row products on the tile kernels, and the products on CUTLASS
    # (modk-configure-gemms' options).
    if [[ "$dt" == bf16 && "$arch" == sm_90a && ( "$base" == gpu_none_* || "$base" == gpu_mod_* ) ]]; then
      for pin in "mma path=mma" "notma tma=false" "gather1 gather-blocks=1" \
                 "stream0 stream-rows=0" "cutlass cutlass"; do
        read -r suffix options <<< "$pin"
        twin "$suffix" --cuda-gemms="$options"
      done
    fi
    # run.sh's attention comparison, for the bf16 sm_90a 0-layer, MoD and
    # dense models: the forward attention on TMA and wgmma.
    if [[ "$dt" == bf16 && "$arch" == sm_90a && ( "$base" == gpu_none_* || "$base" == gpu_mod_* || "$base" == gpu_dense_* ) ]]; then
      twin attnwg --cuda-gemms="tiles attention=wgmma"
    fi
    # run.sh's fusion comparison, for the 0-layer and the MoD model of each
    # dtype: every epilogue fusion left out (modc --no-fuse).
    if [[ "$base" == gpu_none_* || "$base" == gpu_mod_* ]]; then
      twin nofuse --no-fuse=residual-add,activation,rows-epilogue,router-norm,select-gather,copy
    fi
    # run.sh's comparison of each fusion alone, on the bf16 twin of
    # FUSION_MODEL: that one fusion left out.
    if [[ "$dt" == bf16 && "$base" == "$fusion_model" ]]; then
      for f in "${each_fusion[@]}"; do
        twin "no-$f" --no-fuse="$f"
      done
    fi
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
