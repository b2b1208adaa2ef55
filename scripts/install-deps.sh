#!/usr/bin/env bash
# Installs what modc needs on Debian 12 (run as root): LLVM/MLIR 22, fmt,
# nlohmann-json, CLI11 (modrun's command line), PCRE2 (the regexes of
# tokenizer.json pre-tokenizers), GoogleTest, OpenBLAS, a C++
# toolchain, the fortunes corpus used by the demo, clang-14 with libFuzzer
# for the fuzz targets (docs/testing.md), and Open MPI for data-parallel
# training and its tests (docs/distributed.md).
set -euo pipefail
packages=(
  build-essential cmake ninja-build git python3 pkg-config
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libopenblas-dev libopenblas-openmp-dev
  libpcre2-dev
  fortunes fortunes-min
  clang-14 libclang-rt-14-dev
  openmpi-bin libopenmpi-dev
  python3-pip
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
# CUTLASS's C++ headers for CUDA packages built with --cuda-gemms=cutlass
# (docs/cuda.md, "CUTLASS"): pip's wheel, pinned, into a directory of its
# own (cmake/Cutlass.cmake looks there; nothing is installed into Python).
cutlass_version=4.2.0.0
cutlass_dir=/opt/modc-cutlass-$cutlass_version
if [ ! -f "$cutlass_dir/cutlass_library/source/include/cutlass/version.h" ]; then
  echo "install-deps: installing CUTLASS $cutlass_version headers into $cutlass_dir"
  python3 -m pip install -q --no-deps --target "$cutlass_dir" "nvidia-cutlass==$cutlass_version"
else
  echo "install-deps: CUTLASS $cutlass_version present"
fi
# cuobjdump and nvdisasm, which list a CUDA binary's SASS: the tests check
# that the tensor-core kernels hold HGMMA/HMMA (scripts/check-sass.py).
# nvcc 13.0's toolkit may lack them; pip's wheels (13.2, which read 13.0's
# cubins), pinned, into a directory of their own.
sass_version=13.2.51
sass_dir=/opt/modc-cuda-sass-$sass_version
if [ ! -x "$sass_dir/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$sass_dir/nvidia/cu13/bin/nvdisasm" ]; then
  echo "install-deps: installing cuobjdump and nvdisasm $sass_version into $sass_dir"
  python3 -m pip install -q --no-deps --target "$sass_dir" \
    "nvidia-cuda-cuobjdump==$sass_version" "nvidia-cuda-nvdisasm==$sass_version"
else
  echo "install-deps: cuobjdump and nvdisasm $sass_version present"
fi
