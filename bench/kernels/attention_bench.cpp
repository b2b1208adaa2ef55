//===- attention_bench.cpp - Throughput of the CPU attention kernel -------===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Measures modk_cpu::causal_attention on dense segments (one per sequence).
/// Build: c++ -O3 -march=native -fopenmp -I compiler/lib/Target/Cpp/prelude
///        bench/kernels/attention_bench.cpp -lopenblas
/// FLOPs counted: 4 * HD per (query, visible key) pair per head (QK^T and PV).
///
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <ctime>
#include <algorithm>

template <int S, int H, int HD> static void run(int64_t B, int reps) {
  const int64_t rows = B * S;
  std::vector<float> q(rows * H * HD), k(q.size()), v(q.size()), o(q.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto *t : {&q, &k, &v})
    for (float &x : *t)
      x = nd(rng);
  std::vector<int32_t> pos(rows);
  std::vector<int64_t> seg(B + 1);
  modk_cpu::identity_segments<S>(B, pos.data(), seg.data());
  auto once = [&] {
    modk_cpu::causal_attention<H, HD>(q.data(), k.data(), v.data(), B,
                                      seg.data(), pos.data(), o.data());
  };
  once(); // warm up threads, caches and the packing buffer
  // Best of `reps`: the machine may be shared, and the minimum is the
  // most stable estimate of the kernel's own speed.
  double sec = 1e30, cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    auto t0 = std::chrono::steady_clock::now();
    once();
    sec = std::min(sec, std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count());
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    cpu = std::min(cpu, (c1.tv_sec - c0.tv_sec) + 1e-9 * (c1.tv_nsec - c0.tv_nsec));
  }
  double flops = 4.0 * HD * H * B * (double(S) * (S + 1) / 2);
  // Wall-clock rate, and the rate per CPU-second: the latter is robust to
  // other processes sharing the machine.
  std::printf("S=%d H=%d HD=%d B=%lld threads=%d: %.3f ms, %.1f GFLOP/s "
              "(%.1f GFLOP per CPU-second)\n",
              S, H, HD, (long long)B, omp_get_max_threads(), sec * 1e3,
              flops / sec * 1e-9, flops / cpu * 1e-9);
}

int main() {
  run<1024, 8, 64>(4, 15);
  run<2048, 8, 64>(1, 15);
  run<1024, 4, 32>(4, 15);
  run<1024, 8, 128>(2, 15);
  return 0;
}
