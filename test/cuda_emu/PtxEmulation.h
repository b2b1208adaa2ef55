//===- PtxEmulation.h - The CUDA code's PTX, emulated on the CPU -*- C++
//-*-===//
//
// The CPU emulation of the PTX that the mainloop library
// (compiler/lib/Target/Mainloops/Cuda) and the CUDA preludes issue: tensor
// core mma (tf32 and bf16 fragments exchanged across a warp), wgmma read
// through its shared-memory descriptors, cp.async, mbarriers, TMA loads and
// vector loads. CudaCommon.cuh includes it where __CUDACC__ is not defined
// (the kernel tests, `modc --cuda-emulation`), in place of the functions
// that a package built by nvcc defines with their PTX: a package holds no
// emulation code. Each function here has the same name and signature as
// its PTX form, and the documentation of that form says what the emulation
// computes.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_CUDA_EMU_PTXEMULATION_H
#define MODC_TEST_CUDA_EMU_PTXEMULATION_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace modk_cuda {
namespace detail {

/// The 3xTF32 split (GemmTiles.cuh), which the emulated mma3xTf32 uses.
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo);

__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fffffffu; // NaN stays NaN (canonical)
  if ((u & 0x7f800000u) != 0x7f800000u)
    u += 0x1000u; // half an ulp of tf32 on the magnitude: ties go away from 0
  return u & 0xffffe000u; // (a carry out of the largest binade gives inf)
}

/// Emulation of the warp-wide mma: each lane posts its fragment registers
/// here and reads the others' after a __syncwarp (blocks run one at a time
/// on one OS thread, so one buffer per warp index serves every block). Two
/// slots, alternated per exchange, so that one __syncwarp per exchange
/// suffices: a lane overwrites slot p only two exchanges later, after every
/// lane has passed the barrier of the exchange in between and so has
/// finished reading slot p.
struct MmaExchange {
  static constexpr int Words = 64; ///< registers a lane may post at once
  uint32_t w[2][kWarp][Words];
  uint8_t parity[kWarp];
};
inline MmaExchange &mmaExchange(int warp) {
  static thread_local MmaExchange x[1024 / kWarp];
  return x[warp];
}

/// Posts `n` registers of this lane; returns the warp's slot to read after
/// the __syncwarp that the caller does next.
inline const uint32_t (*mmaPost(const uint32_t *regs,
                                int n))[MmaExchange::Words] {
  const int tid =
      int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int lane = tid % kWarp;
  MmaExchange &x = mmaExchange(tid / kWarp);
  const int p = x.parity[lane];
  x.parity[lane] = uint8_t(p ^ 1);
  for (int i = 0; i < n; ++i)
    x.w[p][lane][i] = regs[i];
  return x.w[p];
}

inline int mmaLane() {
  return int(threadIdx.x +
             blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) %
         kWarp;
}

/// Rows g and g + 8 of the A whose fragment of lane l is registers ao..ao+3
/// of slot[l], as the tf32 values the tensor core reads (the low 13 bits
/// ignored): A[row][k] is register (row >= 8) + 2 (k >= 4) of lane
/// (row % 8) * 4 + k % 4.
inline void mmaEmuRowsA(float rows[2][8],
                        const uint32_t (*slot)[MmaExchange::Words], int ao) {
  const int g = mmaLane() >> 2;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 8; ++k)
      rows[h][k] = __uint_as_float(slot[g * 4 + k % 4][ao + h + 2 * (k / 4)] &
                                   0xffffe000u);
}

/// Columns 2t and 2t + 1 of the B whose fragment of lane l is registers bo,
/// bo+1 of slot[l]: B[k][col] is register (k >= 4) of lane col * 4 + k % 4.
inline void mmaEmuColsB(float cols[2][8],
                        const uint32_t (*slot)[MmaExchange::Words], int bo) {
  const int t = mmaLane() & 3;
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 8; ++k)
      cols[e][k] = __uint_as_float(slot[(2 * t + e) * 4 + k % 4][bo + k / 4] &
                                   0xffffe000u);
}

/// This lane's d = A B + c: the eight exact products added to c in k order.
inline void mmaEmuDot(float d[4], const float rows[2][8],
                      const float cols[2][8], const float c[4]) {
  float out[4];
  for (int i = 0; i < 4; ++i) {
    float s = c[i];
    for (int k = 0; k < 8; ++k)
      s = fmaf(rows[i >> 1][k], cols[i & 1][k], s);
    out[i] = s;
  }
  for (int i = 0; i < 4; ++i)
    d[i] = out[i];
}

__device__ __forceinline__ void mma_tf32_m16n8k8(float d[4],
                                                 const uint32_t a[4],
                                                 const uint32_t b[2],
                                                 const float c[4]) {
  const uint32_t regs[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const auto slot = mmaPost(regs, 6);
  __syncwarp();
  float ra[2][8], cb[2][8];
  mmaEmuRowsA(ra, slot, 0);
  mmaEmuColsB(cb, slot, 4);
  mmaEmuDot(d, ra, cb, c);
}

template <int MI, int NI, bool SplitA = true, bool SplitB = true, typename FA,
          typename FB>
__device__ __forceinline__ void mma3xTf32(float (&acc)[MI][NI][4], FA fragA,
                                          FB fragB) {
  // Posted: a_hi of tile i at 4i, a_lo at 4 MI + 4i, b_hi of tile j at
  // 8 MI + 2j, b_lo at 8 MI + 2 NI + 2j.
  constexpr int AL = 4 * MI, BH = 8 * MI, BL = 8 * MI + 2 * NI;
  static_assert(BL + 2 * NI <= MmaExchange::Words, "too many fragments");
  uint32_t regs[BL + 2 * NI];
  for (int i = 0; i < MI; ++i) {
    float a[4];
    fragA(i, a);
    for (int e = 0; e < 4; ++e)
      tf32_split(a[e], regs[4 * i + e], regs[AL + 4 * i + e]);
  }
  for (int j = 0; j < NI; ++j) {
    float b[2];
    fragB(j, b);
    for (int e = 0; e < 2; ++e)
      tf32_split(b[e], regs[BH + 2 * j + e], regs[BL + 2 * j + e]);
  }
  const auto slot = mmaPost(regs, BL + 2 * NI);
  __syncwarp();
  float rhi[MI][2][8], rlo[MI][2][8], chi[NI][2][8], clo[NI][2][8];
  for (int i = 0; i < MI; ++i) {
    mmaEmuRowsA(rhi[i], slot, 4 * i);
    mmaEmuRowsA(rlo[i], slot, AL + 4 * i);
  }
  for (int j = 0; j < NI; ++j) {
    mmaEmuColsB(chi[j], slot, BH + 2 * j);
    mmaEmuColsB(clo[j], slot, BL + 2 * j);
  }
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j) {
      float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (SplitA)
        mmaEmuDot(t, rlo[i], chi[j], t);
      if (SplitB)
        mmaEmuDot(t, rhi[i], clo[j], t);
      mmaEmuDot(t, rhi[i], chi[j], t);
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] += t[e];
    }
}

__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
  return (__float_as_uint(bf16Round(lo)) >> 16) |
         (__float_as_uint(bf16Round(hi)) & 0xffff0000u);
}

/// The f32 value of the bf16 in half h (0: low) of a .bf16x2 register.
inline float bf16Half(uint32_t reg, int h) {
  return __uint_as_float(h ? reg & 0xffff0000u : reg << 16);
}

__device__ __forceinline__ void mma_bf16_m16n8k8(float d[4],
                                                 const uint32_t a[2],
                                                 uint32_t b, const float c[4]) {
  const uint32_t regs[3] = {a[0], a[1], b};
  const auto slot = mmaPost(regs, 3);
  __syncwarp();
  const int g = mmaLane() >> 2, t = mmaLane() & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float s = c[i];
    for (int k = 0; k < 8; ++k) {
      // A[row][k]: lane (row % 8) * 4 + k / 2, register row >= 8;
      // B[k][col]: lane col * 4 + k / 2; half k % 2 of each.
      const float av = bf16Half(slot[(row % 8) * 4 + k / 2][row >= 8], k % 2);
      const float bv = bf16Half(slot[col * 4 + k / 2][2], k % 2);
      s = fmaf(av, bv, s);
    }
    out[i] = s;
  }
  for (int i = 0; i < 4; ++i)
    d[i] = out[i];
}

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return uint32_t(reinterpret_cast<uintptr_t>(p));
}

/// Work a thread issued asynchronously (wgmmas, cp.async copies), in
/// order, and where each committed group ends. The emulation runs a group
/// at the latest time a GPU may: when a wait retires it.
template <class Op> struct AsyncGroups {
  std::vector<Op> ops;
  std::vector<size_t> groupEnds;
  void issue(const Op &op) { ops.push_back(op); }
  /// Closes the group of the work issued since the last commit.
  void commit() { groupEnds.push_back(ops.size()); }
  /// Runs the oldest committed groups, in order, until at most `pending`
  /// are left.
  template <class Run> void retire(size_t pending, Run run) {
    if (groupEnds.size() <= pending)
      return;
    const size_t groups = groupEnds.size() - pending;
    const size_t done = groupEnds[groups - 1];
    for (size_t i = 0; i < done; ++i)
      run(ops[i]);
    ops.erase(ops.begin(), ops.begin() + done);
    groupEnds.erase(groupEnds.begin(), groupEnds.begin() + groups);
    for (size_t &end : groupEnds)
      end -= done;
  }
};

/// The running thread's groups of Op (blocks run one at a time on an OS
/// thread).
template <class Op> inline AsyncGroups<Op> &threadAsyncGroups() {
  static thread_local AsyncGroups<Op> q[1024];
  return q[threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)];
}

/// A cp.async copy issued and not yet landed: the hardware copies
/// asynchronously, and the emulation lands each copy when
/// cp.async.wait_group retires its group (copyAsyncWait), so a thread that
/// reads the destination, or lets another read it, before that wait sees
/// what was there before the copy.
struct PendingCopy {
  float *dst;
  const float *src;
  int floats; ///< 1 or 4
  bool in;    ///< false: zeros (cp.async's src-size 0)
};

__device__ __forceinline__ void copyAsync4(float *dst, const float *src,
                                           bool in) {
  threadAsyncGroups<PendingCopy>().issue({dst, src, 1, in});
}

__device__ __forceinline__ void copyAsync16(float *dst, const float *src,
                                            bool in) {
  threadAsyncGroups<PendingCopy>().issue({dst, src, 4, in});
}

__device__ __forceinline__ void copyAsyncCommit() {
  threadAsyncGroups<PendingCopy>().commit();
}

/// Lands the oldest committed groups until at most N are left in flight.
template <int N> __device__ __forceinline__ void copyAsyncWait() {
  threadAsyncGroups<PendingCopy>().retire(N, [](const PendingCopy &c) {
    for (int k = 0; k < c.floats; ++k)
      c.dst[k] = c.in ? c.src[k] : 0.0f;
  });
}

/// An operand of the emulated wgmma, read through its descriptor the way the
/// hardware reads it: the address comes from the descriptor's 18 bits,
/// resolved against `anchor` (a shared address at or below the operand,
/// within 256 KB), so that a wrong start, LBO or SBO reads wrong values here
/// as it would on a GPU. Three layouts are modelled: K-major without swizzle
/// (core matrices LBO apart along K, SBO apart along the rows), K-major with
/// the 128-byte swizzle (a 128-byte row per operand row, 8-row groups SBO
/// apart) and, for a transposed operand (`mnMajor`: wgmma's imm-trans 1),
/// MN-major with the 128-byte swizzle (a 128-byte row of 64 rows' elements
/// per reduction step, 8-step groups SBO apart, 64-row groups LBO apart:
/// the PTX ISA's canonical layout ((8 x 16 B, n), (8, k)) : ((16 B, LBO),
/// (128 B, SBO))); with the swizzle the 16-byte chunk index is XORed with
/// address bits 7..9, as TMA stores it.
struct WgmmaOperandView {
  const unsigned char *start;
  uint32_t lbo, sbo;
  bool swizzle128, mnMajor;
  WgmmaOperandView(uint64_t desc, const void *anchor, bool transposed)
      : mnMajor(transposed) {
    const unsigned layout = unsigned(desc >> 62);
    if ((layout != 0 && layout != 1) || ((desc >> 49) & 7u) != 0) {
      std::fprintf(stderr, "emulated wgmma: only unswizzled and 128-byte "
                           "swizzled descriptors with base offset 0 are "
                           "modelled\n");
      std::abort();
    }
    swizzle128 = layout == 1;
    if (mnMajor && !swizzle128) {
      std::fprintf(stderr, "emulated wgmma: a transposed operand is modelled "
                           "with the 128-byte swizzle only\n");
      std::abort();
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(anchor);
    uintptr_t s = (a & ~uintptr_t(0x3ffff)) | uintptr_t(desc & 0x3fffu) << 4;
    if (s < a)
      s += 0x40000;
    start = reinterpret_cast<const unsigned char *>(s);
    lbo = uint32_t((desc >> 16) & 0x3fffu) << 4;
    sbo = uint32_t((desc >> 32) & 0x3fffu) << 4;
  }
  /// Element (row, k) of the operand (row along M or N), as f32.
  float at(int row, int k) const {
    uint16_t h;
    uintptr_t at = reinterpret_cast<uintptr_t>(start);
    if (mnMajor) {
      at = modc_emu::swizzle128(at + (row / 64) * lbo + (k / 8) * sbo +
                                (k % 8) * 128 + (row % 64) * 2);
    } else if (swizzle128) {
      at += (row / 8) * sbo;
      at = modc_emu::swizzle128(at + (row % 8) * 128 + k * 2);
    } else {
      at += (row / 8) * sbo + (k / 8) * lbo + (row % 8) * 16 + (k % 8) * 2;
    }
    std::memcpy(&h, reinterpret_cast<const unsigned char *>(at), 2);
    return __uint_as_float(uint32_t(h) << 16);
  }
};

/// One issued wgmma, run when a wait retires its group: the hardware runs
/// wgmma asynchronously, reading its shared-memory operands and the
/// accumulators d at some time before the wgmma.wait_group that covers it,
/// so the emulation runs it at the latest such time. A kernel that reads or
/// writes d, or overwrites an operand's shared memory, before that wait
/// sees here what a GPU may show it (docs/cuda.md, "The CUDA emulation").
/// A from registers (wgmmaBf16RegA) is read there too, so a kernel that
/// writes those registers before the wait, which the PTX ISA forbids,
/// computes with the new values here.
struct PendingWgmma {
  float *d = nullptr; ///< the accumulators, float[n / 8][4]
  int n = 0;
  bool transA = false, transB = false;
  uint64_t descA = 0, descB = 0;
  const void *anchor = nullptr;
  const uint32_t *aRegs = nullptr; ///< A's four registers, or null: shared
};

/// Runs one wgmma: this lane's elements of d += A B over a k16 step.
inline void runWgmma(const PendingWgmma &op) {
  const int tid =
      int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int w = (tid % 128) / kWarp, g = (tid % kWarp) >> 2, t = tid % 4;
  // This lane's rows g and g + 8 of the warp's 16, as A values.
  float a[2][16];
  if (op.aRegs) {
    // Each lane posts its four .bf16x2 registers (wgmmaBf16RegA's
    // fragment: A[16w + g + 8 (i % 2)][2t + 8 (i / 2) + e] in half e of
    // register i) and reads its warp's after a __syncwarp: every lane of
    // the warpgroup runs the same waits (.aligned).
    const uint32_t regs[4] = {op.aRegs[0], op.aRegs[1], op.aRegs[2],
                              op.aRegs[3]};
    const auto slot = mmaPost(regs, 4);
    __syncwarp();
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k) {
        const int row = g + 8 * h;
        // Lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8).
        a[h][k] = bf16Half(
            slot[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)],
            k % 2);
      }
  } else {
    const WgmmaOperandView view(op.descA, op.anchor, op.transA);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k)
        a[h][k] = view.at(16 * w + g + 8 * h, k);
  }
  const WgmmaOperandView b(op.descB, op.anchor, op.transB);
  for (int j = 0; j < op.n / 8; ++j)
    for (int x = 0; x < 4; ++x) { // x = 2h + e
      const int col = 8 * j + 2 * t + x % 2;
      float s = op.d[4 * j + x];
      for (int k = 0; k < 16; ++k)
        s = fmaf(a[x / 2][k], b.at(col, k), s);
      op.d[4 * j + x] = s;
    }
}

/// A thread that ends with wgmmas or cp.async copies it never waited for:
/// on a GPU their results would be lost or land after the kernel read
/// them, or in shared memory the block no longer owns.
inline void asyncWorkCheckDrained() {
  const size_t wgmmas = threadAsyncGroups<PendingWgmma>().ops.size(),
               copies = threadAsyncGroups<PendingCopy>().ops.size();
  if (wgmmas + copies == 0)
    return;
  std::fprintf(stderr,
               "emulated async work: thread (%u, %u, %u) of block (%u, %u, "
               "%u) ended with %zu wgmma(s) and %zu cp.async copies not "
               "waited for\n",
               threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y,
               blockIdx.z, wgmmas, copies);
  std::abort();
}
inline const bool asyncDrainCheckInstalled =
    (modc_emu::threadExitCheck = &asyncWorkCheckDrained, true);

template <int N, bool TRANS_A = false, bool TRANS_B = false>
__device__ __forceinline__ void wgmmaBf16(float (&d)[N / 8][4], uint64_t descA,
                                          uint64_t descB, const void *anchor) {
  static_assert(N == 64 || N == 128, "wgmma widths of the GEMM tiles");
  threadAsyncGroups<PendingWgmma>().issue(
      {&d[0][0], N, TRANS_A, TRANS_B, descA, descB, anchor, nullptr});
}

/// wgmma with A from registers, read when a wait retires it (runWgmma): the
/// registers `a` must hold their values until then, as on a GPU; B through
/// its descriptor as wgmmaBf16's.
template <int N, bool TRANS_B = false>
__device__ __forceinline__ void
wgmmaBf16RegA(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t descB,
              const void *anchor) {
  static_assert(N == 64 || N == 128, "the attention's wgmma widths");
  threadAsyncGroups<PendingWgmma>().issue(
      {&d[0][0], N, false, TRANS_B, 0, descB, anchor, a});
}

template <int J>
__device__ __forceinline__ void wgmmaPinAccumulators(float (&d)[J][4]) {
  (void)d;
}

template <int J> __device__ __forceinline__ void wgmmaFence(float (&d)[J][4]) {
  wgmmaPinAccumulators(d);
}

/// Closes the group of the wgmmas issued since the last commit.
__device__ __forceinline__ void wgmmaCommit() {
  threadAsyncGroups<PendingWgmma>().commit();
}

/// Runs the oldest committed groups until at most PENDING are left. Where
/// it runs any, the block's other threads get a turn first (yield): the
/// wgmmas run at the end of the time a GPU may run them, so a kernel that
/// lets their operands be overwritten before this wait (a stage released
/// to the TMA producer) has them read the new contents here.
template <int PENDING, int J>
__device__ __forceinline__ void wgmmaWait(float (&d)[J][4]) {
  wgmmaPinAccumulators(d);
  AsyncGroups<PendingWgmma> &groups = threadAsyncGroups<PendingWgmma>();
  if (groups.groupEnds.size() > size_t(PENDING))
    modc_emu::yield();
  groups.retire(PENDING, runWgmma);
}

/// setmaxnreg: a register budget, nothing to emulate.
template <int N> __device__ __forceinline__ void setMaxRegistersInc() {}
template <int N> __device__ __forceinline__ void setMaxRegistersDec() {}

__device__ __forceinline__ void fenceProxyAsync() {}

__device__ __forceinline__ void mbarrierInit(uint64_t *bar, unsigned count) {
  modc_emu::mbarrierInit(bar, count);
}

__device__ __forceinline__ void fenceMbarrierInit() {}

__device__ __forceinline__ void mbarrierArriveExpectTx(uint64_t *bar,
                                                       unsigned bytes) {
  modc_emu::mbarrierArriveExpectTx(bar, bytes);
}

__device__ __forceinline__ void mbarrierWait(uint64_t *bar, unsigned parity) {
  while (!modc_emu::mbarrierTryWaitParity(bar, parity))
    modc_emu::spin();
}

__device__ __forceinline__ void tmaLoad2d(void *dst, const CUtensorMap *map,
                                          int c0, int c1, uint64_t *bar) {
  modc_emu::tmaLoad2d(dst, map, c0, c1, bar);
}

__device__ __forceinline__ void mbarrierArrive(uint64_t *bar) {
  modc_emu::mbarrierArrive(bar);
}

} // namespace detail

namespace decode_detail {

__device__ __forceinline__ float4 load4(const float *p) {
  return make_float4(p[0], p[1], p[2], p[3]);
}

__device__ __forceinline__ float4 load4(const bf16 *p) {
  return make_float4(p[0], p[1], p[2], p[3]);
}

} // namespace decode_detail
} // namespace modk_cuda

#endif // MODC_TEST_CUDA_EMU_PTXEMULATION_H
