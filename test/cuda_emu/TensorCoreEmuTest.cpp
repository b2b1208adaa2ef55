//===- TensorCoreEmuTest.cpp - Tensor-core checks under the emulation -----===//
//
// Part of the modc project.
//
// TensorCoreChecks.h run against the preludes' emulated mma and wgmma. The
// same checks run on a GPU from test/gpu/tensor_core_check.cu.
//
//===----------------------------------------------------------------------===//

#include "TensorCoreChecks.h"

namespace {

TEST(TensorCores, MmaTf32FragmentLayout) {
  modc_tc_check::checkMmaTf32Fragments();
}

TEST(TensorCores, MmaBf16FragmentLayout) {
  modc_tc_check::checkMmaBf16Fragments();
}

TEST(TensorCores, WgmmaDescriptorsAndFragments) {
  modc_tc_check::checkWgmmaDescriptorsAndFragments();
}

TEST(TensorCores, Bf16GemmsOnEveryPath) {
  modc_tc_check::forEachBf16GemmPath(modc_tc_check::checkBf16GemmShapes);
}

TEST(TensorCores, Bf16StoredOperandsOnEveryPath) {
  modc_tc_check::forEachBf16GemmPath(
      modc_tc_check::checkBf16StoredOperandShapes);
}

TEST(TensorCores, TmaGemmsMatchWgmmaAndFp64) {
  modc_tc_check::checkTmaGemmShapes();
}

TEST(TensorCores, TmaBackwardMatchesWgmmaAndFp64) {
  modc_tc_check::checkTmaBackwardShapes();
}

TEST(TensorCores, RopeEpilogueOnEveryPath) {
  modc_tc_check::forEachBf16GemmPath(modc_tc_check::checkFusedRopeShapes);
}

TEST(TensorCores, RopeEpilogueOnTma) { modc_tc_check::checkTmaRopeShapes(); }

/// While a decode step is captured into a graph, no angle table may be
/// allocated: linear_rope then rotates in the rope kernel, and the replayed
/// graph gives the bits of the fused epilogue.
TEST(TensorCores, RopeDuringCaptureTakesTheKernel) {
  using namespace modc_tc_check;
  namespace d = modk_cuda::detail;
  constexpr int H = 2, HD = 32, K = 24, N = H * HD;
  const int64_t rows = 9;
  int64_t count = rows; // the row count on the "device"
  const float theta = 12345.0f; // a table no other test built
  const auto a = randomFloats(rows * K, 3901), w = randomFloats(N * K, 3902);
  const auto pos = randomInts(rows, 3903, 0, 99);
  gemm_hooks::tile() = 2; // the mma.sync tile that holds heads of 32
  std::vector<float> captured(rows * N, kSentinel), fused(rows * N, kSentinel);
  const int64_t before = d::fusedRopeLaunches();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  modk_cuda::linear_rope<H, HD, K>(a.data(), &count, rows, w.data(),
                                   pos.data(), theta, 100, captured.data(), s);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(d::fusedRopeLaunches(), before);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  modk_cuda::linear_rope<H, HD, K>(a.data(), &count, rows, w.data(),
                                   pos.data(), theta, 100, fused.data(), s);
  EXPECT_EQ(d::fusedRopeLaunches(), before + 1);
  gemm_hooks::tile() = 0;
  expectSameBits(captured, fused, "captured rope against the fused epilogue");
}

} // namespace
