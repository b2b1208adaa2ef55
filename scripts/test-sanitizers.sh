#!/usr/bin/env bash
# The sanitizer run (docs/testing.md, "Sanitizers"): the runtime, numerics and
# CLI tests with AddressSanitizer (LeakSanitizer included) and
# UndefinedBehaviorSanitizer, the packages they compile sanitized too.
#
#   scripts/test-sanitizers.sh [--full] [ctest arguments...]
#
# Default (what scripts/test.sh runs, after the main build): build-asan-light/
# builds only the runtime, modrun and the reference, runtime, numerics and
# CUDA-vs-CPU tests, sanitized (-DMODC_SANITIZE=ON), with -O1, and uses the
# uninstrumented compiler of the main build (-DMODC_TOOLS_DIR=build/bin; run
# scripts/build.sh first) to compile sanitized packages. It leaves out the
# tests listed in LIGHT_EXCLUDE below (docs/testing.md says why).
#
# --full: everything, the compiler included (still uninstrumented), into
# build-asan/ (-O2 -g, packages at -O3), and every test but those of
# FULL_EXCLUDE; about 25 minutes of building on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=light
if [[ ${1:-} == --full ]]; then
  mode=full
  shift
fi

# Both runs leave out the kernel suites (the preludes are compiled into the
# test binaries for AVX2 and AVX-512: slow to build and run under ASan, and
# the numerics tests run the same code through packages), the install test,
# and errors_doc: several of its cases limit virtual memory (ulimit -v) to
# provoke out-of-memory errors, and ASan cannot start under such a limit.
FULL_EXCLUDE='^(CpuKernels|Cuda|TensorCores|Emulation|cuda_emu|kernel_tests|install$|errors_doc$)'
# The light run also leaves out: the CUDA packages on the CPU emulation (each
# takes about a minute under ASan, run alone at the end of the list; --full
# runs them, and with them the check that the emulation frees its device
# memory at exit), those built by nvcc (skipped without a GPU anyway) and the
# two slowest numerics tests.
# docs/testing.md says more.
LIGHT_EXCLUDE='_sm_[0-9]|_emulated( |$)|_emulated_bf16( |$)'
LIGHT_EXCLUDE+='|^(Bf16Grad\.CloseToF32Gradients|CompiledEquivalence\.FullCapacityGateOneEqualsDense)$'
# And, to keep CI under 30 minutes, repeats of what it runs: the one-sequence
# cases of the logits matrix (their models run with three sequences), the
# manifest matrix (the compiler's output, not the runtime's), and the decode
# cases of the models that route every layer (every other layer routes in
# the ones kept).
LIGHT_EXCLUDE+='|^Matrix/CompiledVsReference\.LogitsAndRouting/.*_B1_|^Matrix/ManifestMatchesSpec\.'
LIGHT_EXCLUDE+='|^Models/DecodeIntegrationTest\..*/(predictor|aux)_all( |$)'
# The MoE checks that compile models of their own (the tied-logits and the
# one-expert identity checks); the MoE matrix runs the same kernels.
LIGHT_EXCLUDE+='|^(MoeTies|MoeIdentity|MoeBf16)\.'
# Half of the gradient matrix: the six models kept cover its features
# (dense, GQA and MQA, GELU and SwiGLU, tied and untied, every gate, every
# causal router, one-token and larger shapes); and the bf16 logits case
# whose model runs with three sequences too. No groups here: CMake's regular
# expressions take at most ten, which the patterns above use up (past that
# the whole expression silently matches nothing). Parameterised tests' names
# end in "  # GetParam() = ...": the space ends a name.
for name in EveryOtherSwigluTiedC125LinearPredictor EveryOtherSwigluTiedC125LinearAux \
  AllSwigluUntiedC100SigmoidPredictor AllGeluUntiedC125SigmoidAux \
  EveryOtherGeluTiedC100LinearAux AllGeluUntiedOneTokenSigmoidPredictor; do
  LIGHT_EXCLUDE+="|^Matrix/CompiledGradVsReference\\.LossesAndGradients/$name "
done
LIGHT_EXCLUDE+='|^Models/Bf16VsReference\.LogitsAndRouting/RoutedSwigluPredictor_B2_topk '

scripts/install-deps.sh
# intercept_tls_get_addr=0: GCC 12's __tls_get_addr interceptor can misread
# a dynamic TLS block (the packages' thread_local scratch vectors live in
# them) and crash LeakSanitizer's tracer at exit (test/fuzz/SanitizerOptions.cpp).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
jobs="$(nproc)"

if [[ $mode == full ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMODC_SANITIZE=ON
  cmake --build build-asan -j"$jobs"
  ctest --test-dir build-asan --output-on-failure -j"$jobs" \
    -E "$FULL_EXCLUDE" "$@"
  exit
fi

# The compiler of the main build (or MODC_TOOLS_DIR: another build's bin/).
tools="${MODC_TOOLS_DIR:-$PWD/build/bin}"
if [[ ! -x $tools/modc ]]; then
  echo "test-sanitizers: $tools/modc is missing; run scripts/build.sh first" >&2
  exit 1
fi
# -O1 -g1: a third of the compile time of -O2 -g under ASan and UBSan, with
# line numbers in the reports; the packages at -O1 too (not modc's -O3). A
# unity build: each target's files compiled together parse the headers they
# share (GoogleTest, fmt, nlohmann-json) once, which halves the build (GCC
# takes the included files for headers, hence -Wno-subobject-linkage).
cmake -S . -B build-asan-light -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG -Wno-subobject-linkage" \
  -DCMAKE_UNITY_BUILD=ON \
  -DMODC_SANITIZE=ON -DMODC_TOOLS_DIR="$tools" -DMODC_TOOLS_PACKAGE_FLAGS=-O1 \
  -DMODC_TEST_PARTS="reference;runtime;numerics;gpu"
cmake --build build-asan-light -j"$jobs"
ctest --test-dir build-asan-light --output-on-failure -j"$jobs" \
  -E "$LIGHT_EXCLUDE" "$@"
