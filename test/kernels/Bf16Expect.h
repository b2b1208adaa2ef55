//===- Bf16Expect.h - bf16 buffer checks of the CPU kernel tests -*- C++ -*-===//
//
// Shared by the forward and training kernel tests: a kernel that stores into
// a bf16 buffer (modk-store-bf16) must store its f32 result rounded once.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_KERNELS_BF16EXPECT_H
#define MODC_TEST_KERNELS_BF16EXPECT_H

#include "CpuKernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

/// got[i] is want[i] rounded to bf16 (what a bf16 buffer must hold: the
/// f32 result's bits, rounded once).
inline void expectRoundedCopy(const std::vector<modk_cpu::bf16> &got,
                              const std::vector<float> &want,
                              const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = got[i], w = modk_cpu::bf16_round(want[i]);
    ASSERT_EQ(0, std::memcmp(&g, &w, sizeof(float)))
        << what << "[" << i << "]: " << g << " against " << w;
  }
}

#endif // MODC_TEST_KERNELS_BF16EXPECT_H
