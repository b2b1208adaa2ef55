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

} // namespace
