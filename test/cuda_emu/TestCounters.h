//===- TestCounters.h - Counters the CUDA kernel tests read -------*- C++
//-*-===//
//
// The CUDA preludes and mainloops count a few host-side events for tests
// (MODC_TEST_COUNT, a no-op in a package): TMA GEMM launches, the weight
// roundings for them, GEMMs that applied RoPE in their epilogue, and
// launches of the few-row kernel, grouped launches and the wgmma attention
// kernel's launches and its gradient's, so that a check can
// tell which path ran.
// This header makes the counts real and offers them as
// modk_cuda::detail::tmaStats(), fusedRopeLaunches(), streamLaunches(),
// groupedLaunches(), attentionWgmmaLaunches() and
// attentionGradWgmmaLaunches().
// It is included before the kernels: through CudaEmulation.h in every emulated
// translation unit (so every unit agrees on the inline functions), and by
// TensorCoreChecks.h for the GPU build of test/gpu/tensor_core_check.cu.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_CUDA_EMU_TESTCOUNTERS_H
#define MODC_TEST_CUDA_EMU_TESTCOUNTERS_H

#include <cstdint>

namespace modc_test_counters {
inline int64_t tmaLaunches = 0, tmaRoundings = 0, fusedRopeLaunches = 0,
               streamLaunches = 0, groupedLaunches = 0, siblingLaunches = 0,
               attentionWgmmaLaunches = 0, attentionGradWgmmaLaunches = 0;
} // namespace modc_test_counters

#define MODC_TEST_COUNT(counter) (++::modc_test_counters::counter)

namespace modk_cuda {
namespace detail {
/// TMA kernel launches and weight roundings so far.
struct TmaStats {
  int64_t launches = 0, roundings = 0;
};
inline TmaStats tmaStats() {
  return {modc_test_counters::tmaLaunches, modc_test_counters::tmaRoundings};
}
/// GEMM launches that applied RoPE in their epilogue so far.
inline int64_t fusedRopeLaunches() {
  return modc_test_counters::fusedRopeLaunches;
}
/// Launches of the few-row (weight-streaming) product kernel so far.
inline int64_t streamLaunches() { return modc_test_counters::streamLaunches; }
/// Grouped product launches (modk.gemm's `group`) so far.
inline int64_t groupedLaunches() { return modc_test_counters::groupedLaunches; }
/// Sibling product launches (modk.gemm's `siblings`) so far.
inline int64_t siblingLaunches() { return modc_test_counters::siblingLaunches; }
/// Launches of the wgmma attention kernel (attentionWgmmaKernel) so far.
inline int64_t attentionWgmmaLaunches() {
  return modc_test_counters::attentionWgmmaLaunches;
}
/// Launches of the attention gradient's wgmma kernels (attnGradQueryWgmma,
/// attnGradKeyWgmma).
inline int64_t attentionGradWgmmaLaunches() {
  return modc_test_counters::attentionGradWgmmaLaunches;
}
} // namespace detail
} // namespace modk_cuda

#endif // MODC_TEST_CUDA_EMU_TESTCOUNTERS_H
