//===- tensor_core_check.cu - The tensor-core checks on a GPU -------------===//
//
// Part of the modc project.
//
// test/cuda_emu/TensorCoreChecks.h compiled by nvcc for sm_90a with the
// wgmma GEMM on (MODC_CUDA_WGMMA), run on the GPU: the mma and wgmma
// fragment layouts and descriptors as the hardware implements them, and the
// bf16 GEMMs on mma.sync and on wgmma against fp64. The emulation runs the
// same checks in CI (cuda_emu_tests, TensorCores.*); a failure here alone
// means the PTX ISA was misread. Built by test/gpu/prepare.sh:
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a
//        -DMODC_CUDA_WGMMA=1 -Icompiler/lib/Target/Cuda/prelude
//        -Icompiler/lib/Target/Mainloops/Cuda
//        -Itest/cuda_emu test/gpu/tensor_core_check.cu -lgtest -lgtest_main
//
// Without a GPU, or on one that is not compute capability 9.0, every test
// skips, saying why.
//
//===----------------------------------------------------------------------===//

#include "TensorCoreChecks.h"

#include <string>

namespace {

/// Empty when this machine runs sm_90a code, else why not.
std::string whyNoSm90a() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    return "no CUDA device";
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  if (prop.major != 9 || prop.minor != 0)
    return std::string(prop.name) + " is compute capability " +
           std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           "; this build is sm_90a";
  return "";
}

class TensorCoresOnGpu : public ::testing::Test {
protected:
  void SetUp() override {
    static const std::string why = whyNoSm90a();
    if (!why.empty())
      GTEST_SKIP() << why;
  }
};

TEST_F(TensorCoresOnGpu, MmaTf32FragmentLayout) {
  modc_tc_check::checkMmaTf32Fragments();
}

TEST_F(TensorCoresOnGpu, MmaBf16FragmentLayout) {
  modc_tc_check::checkMmaBf16Fragments();
}

TEST_F(TensorCoresOnGpu, WgmmaDescriptorsAndFragments) {
  modc_tc_check::checkWgmmaDescriptorsAndFragments();
}

TEST_F(TensorCoresOnGpu, Bf16GemmsOnMmaAndWgmma) {
  modc_tc_check::forEachBf16GemmPath(modc_tc_check::checkBf16GemmShapes);
}

TEST_F(TensorCoresOnGpu, Bf16StoredOperandsOnMmaAndWgmma) {
  modc_tc_check::forEachBf16GemmPath(
      modc_tc_check::checkBf16StoredOperandShapes);
}

TEST_F(TensorCoresOnGpu, TmaGemmsMatchWgmmaAndFp64) {
  if (!MODC_CUDA_WGMMA)
    GTEST_SKIP() << "built without MODC_CUDA_WGMMA (sm_90a): no TMA GEMM";
  modc_tc_check::checkTmaGemmShapes();
}

TEST_F(TensorCoresOnGpu, TmaBackwardMatchesWgmmaAndFp64) {
  if (!MODC_CUDA_WGMMA)
    GTEST_SKIP() << "built without MODC_CUDA_WGMMA (sm_90a): no TMA GEMM";
  modc_tc_check::checkTmaBackwardShapes();
}

TEST_F(TensorCoresOnGpu, RopeEpilogueOnMmaAndWgmma) {
  modc_tc_check::forEachBf16GemmPath(modc_tc_check::checkFusedRopeShapes);
}

TEST_F(TensorCoresOnGpu, RopeEpilogueOnTma) {
  if (!MODC_CUDA_WGMMA)
    GTEST_SKIP() << "built without MODC_CUDA_WGMMA (sm_90a): no TMA GEMM";
  modc_tc_check::checkTmaRopeShapes();
}

} // namespace
