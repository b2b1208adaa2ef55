//===- CudaTargets.h - The parts a CUDA package is compiled for -*- C++ -*-===//
//
// One description per `--arch`: the part's SMs and shared memory, whether it
// has wgmma and TMA, and what CUTLASS offers on it for bf16 products and for
// f32 ones (the tiles, their schedules and clusters, and the rules for
// stages and raster order).
// modk-configure-gemms chooses each product's kernels from it and records
// the choice in #modk.gemm_config; the CUDA emitter reads the same
// description where a configuration leaves something to the part (sm_80's
// warp tiles), so the two never disagree (docs/cuda.md, "Which kernels a
// product runs").
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODK_CUDATARGETS_H
#define MODC_DIALECT_MODK_CUDATARGETS_H

#include "modc/Dialect/Modk/ModkDialect.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cstdint>

namespace modc::cuda {

/// How CUTLASS builds a product's kernel on a part.
enum class CutlassGeneration {
  /// CUTLASS 3.x collective builders: TMA warp-specialised kernels (sm_90a).
  collectiveBuilders,
  /// CUTLASS 2.x multistage tensor-op kernels (sm_80).
  multistage,
};

/// A CTA tile CUTLASS offers on a part, smallest first in its table. On
/// sm_80 a tile also names its warps' tile (CUTLASS 2.x takes it as a
/// template argument); sm_90a's warpgroups split the tile by the schedule.
struct CutlassTile {
  int64_t rows, cols, depth;
  int64_t warpRows, warpCols; ///< sm_80 only (0 on sm_90a)
  modk::CutlassSchedule schedule;
  /// CTAs of a cluster along the rows where the product has that many row
  /// tiles: they share the weight's tile by TMA multicast (1: no cluster).
  int64_t clusterRows;
  int64_t ctasPerSm; ///< CTAs an SM holds at once (shared memory shared)
  int64_t maxStages;
};

/// What CUTLASS offers on a part for products of one precision.
struct CutlassTarget {
  CutlassGeneration generation;
  const CutlassTile *tiles;
  size_t tileCount;
  /// Shared memory the epilogue keeps beside the mainloop's stages, per
  /// byte of an output element: sm_90a's TMA store stages rows x 32
  /// columns of the output twice; sm_80's epilogue reuses the stages (0).
  int64_t epilogueBytesPerOutputByte;
  /// Bytes of alignment every operand's rows need (16: 8 bf16, 4 f32).
  int64_t alignmentBytes;
  /// The most chunks a weight gradient's reduction (its rows) splits into
  /// where its output tiles do not fill the part (1: no split): sm_90a's
  /// stream-K scheduler in its split-K mode, or a group's members' chunks;
  /// sm_80's serial split-K (docs/cuda.md, "CUTLASS").
  int64_t maxSplitK;
  /// Bytes of an operand element in the stages: 2 for bf16 products, 4
  /// for f32 ones, whose kernels keep the f32 operands and split each into
  /// TF32 halves in registers (tf32x3).
  int64_t operandBytes;

  llvm::ArrayRef<CutlassTile> tileList() const { return {tiles, tileCount}; }
  bool collectiveBuilders() const {
    return generation == CutlassGeneration::collectiveBuilders;
  }
};

/// A part a CUDA package is compiled for (docs/cuda.md).
struct CudaPart {
  llvm::StringRef arch, name;
  int64_t sms;
  int64_t sharedBytesPerSm; ///< what the CTAs on one SM can share
  bool wgmma;               ///< wgmma and TMA (sm_90a)
  CutlassTarget cutlass;    ///< bf16 products
  /// f32 products: CUTLASS 2.x's multistage kernels on both parts, as
  /// three TF32 mma.sync products each (OpMultiplyAddFastF32), which keep
  /// the f32 precision the package promises. CUTLASS has no wgmma mainloop
  /// that does so on sm_90a.
  CutlassTarget cutlassF32;
};

// sm_90a: a pingpong tile for products with few row tiles, cooperative
// tiles (each consumer warpgroup takes half the rows) above; one CTA an SM,
// with as many stages as its shared memory holds.
inline constexpr CutlassTile kSm90CutlassTiles[] = {
    {64, 128, 64, 0, 0, modk::CutlassSchedule::pingpong, 1, 1, 8},
    {128, 128, 64, 0, 0, modk::CutlassSchedule::cooperative, 2, 1, 8},
    {128, 256, 64, 0, 0, modk::CutlassSchedule::cooperative, 2, 1, 8},
};
// sm_80: multistage cp.async kernels of 4 or 8 warps, two CTAs an SM on the
// smaller tiles.
inline constexpr CutlassTile kSm80CutlassTiles[] = {
    {64, 128, 32, 32, 64, modk::CutlassSchedule::multistage, 1, 2, 6},
    {128, 128, 32, 64, 64, modk::CutlassSchedule::multistage, 1, 2, 5},
    {128, 256, 32, 64, 64, modk::CutlassSchedule::multistage, 1, 1, 4},
};

// f32 products on both parts (tf32x3): one tile, whose f32 stages 16 deep
// take the bytes of a bf16 tile's 32 deep. Its eight warps of 32x32 keep
// 32 accumulators a thread beside the operands' big and small TF32 halves:
// with 64 (warps of 32x64, or a 128x128 tile's 64x32) the grouped kernels
// spilled on sm_80 (nvcc 13). About 180 registers a thread: one CTA an SM.
inline constexpr CutlassTile kTf32x3CutlassTiles[] = {
    {64, 128, 16, 32, 32, modk::CutlassSchedule::multistage, 1, 1, 6},
};
inline constexpr CutlassTarget kTf32x3Cutlass = {CutlassGeneration::multistage,
                                                 kTf32x3CutlassTiles,
                                                 std::size(kTf32x3CutlassTiles),
                                                 0,
                                                 16,
                                                 16,
                                                 4};

inline constexpr CudaPart kCudaParts[] = {
    {"sm_90a",
     "H100 SXM",
     132,
     227 * 1024,
     true,
     {CutlassGeneration::collectiveBuilders, kSm90CutlassTiles,
      std::size(kSm90CutlassTiles), 2 * 32, 16, 16, 2},
     kTf32x3Cutlass},
    {"sm_80",
     "A100 SXM",
     108,
     163 * 1024,
     false,
     {CutlassGeneration::multistage, kSm80CutlassTiles,
      std::size(kSm80CutlassTiles), 0, 16, 16, 2},
     kTf32x3Cutlass},
};

/// The part of `arch`, or null.
inline const CudaPart *findCudaPart(llvm::StringRef arch) {
  for (const CudaPart &p : kCudaParts)
    if (p.arch == arch)
      return &p;
  return nullptr;
}

/// Shared memory a block may take on `part` (the part's SM holds it whole).
inline int64_t sharedBytesPerBlock(const CudaPart &part) {
  return part.sharedBytesPerSm;
}

/// The CUTLASS description of `part` for bf16 products, or for f32 ones
/// (`tf32x3`).
inline const CutlassTarget &cutlassTarget(const CudaPart &part, bool tf32x3) {
  return tf32x3 ? part.cutlassF32 : part.cutlass;
}

/// Shared memory one stage of operand tiles takes, with its two mbarriers
/// (CUTLASS 3.x's pipelines) or none (2.x's).
inline int64_t cutlassStageBytes(const CutlassTarget &lib,
                                 const CutlassTile &t) {
  int64_t barriers = lib.collectiveBuilders() ? 16 : 0;
  return (t.rows + t.cols) * t.depth * lib.operandBytes + barriers;
}

/// Shared memory the epilogue of a tile keeps beside the stages, for output
/// elements of `outputBytes` bytes: on sm_90a, two stages of the store's
/// subtiles (rows x 32 columns). `sourceBytes` (0: none): the epilogue also
/// reads a source of elements of that many bytes (a residual add's or an
/// accumulating input gradient's old values, SwiGLU's gate), which TMA
/// loads into four stages of subtiles (every tile of the table has four
/// subtiles or more); the store reuses them where the elements are as wide.
inline int64_t cutlassEpilogueBytes(const CutlassTarget &lib,
                                    const CutlassTile &t, int64_t outputBytes,
                                    int64_t sourceBytes = 0) {
  int64_t twoStages = t.rows * lib.epilogueBytesPerOutputByte;
  if (sourceBytes == 0)
    return twoStages * outputBytes;
  if (sourceBytes == outputBytes)
    return twoStages * 2 * sourceBytes;
  return twoStages * (2 * sourceBytes + outputBytes);
}

/// Bytes kept for the kernel's own bookkeeping (alignment, the pipelines'
/// and the scheduler's barriers).
inline constexpr int64_t kCutlassReservedSharedBytes = 1024;

/// Bytes a grouped (ptr-array) kernel keeps besides: the TMA descriptors
/// it rewrites for each member (the operands', the source's and the
/// store's) live in shared memory.
inline constexpr int64_t kCutlassGroupedSharedBytes = 1024;

/// The stages of a tile of `lib` on `part`: as many as its CTAs' shared
/// memory holds beside the epilogue's (and a grouped kernel's
/// descriptors), at most the tile's maximum (0: the tile does not fit at
/// all).
inline int64_t cutlassStages(const CudaPart &part, const CutlassTarget &lib,
                             const CutlassTile &t, int64_t outputBytes,
                             int64_t sourceBytes = 0, bool grouped = false) {
  int64_t budget = sharedBytesPerBlock(part) / t.ctasPerSm -
                   cutlassEpilogueBytes(lib, t, outputBytes, sourceBytes) -
                   kCutlassReservedSharedBytes -
                   (grouped ? kCutlassGroupedSharedBytes : 0);
  int64_t stages = budget / cutlassStageBytes(lib, t);
  if (stages < 2)
    return 0;
  return std::min(stages, t.maxStages);
}

/// The tile of `lib`'s table with this shape, or null: the emitter's way
/// back from a #modk.gemm_config to the warp tile.
inline const CutlassTile *findCutlassTile(const CutlassTarget &lib,
                                          int64_t rows, int64_t cols,
                                          int64_t depth) {
  for (const CutlassTile &t : lib.tileList())
    if (t.rows == rows && t.cols == cols && t.depth == depth)
      return &t;
  return nullptr;
}

/// The name of modk.gemm's `device_rows_config` (ModkOps.td), which
/// modk-configure-gemms sets where an epilogue that must not touch a row
/// past the count runs over rows the device counts: the `grouped` CUTLASS
/// variants of its one-member grouped launch (docs/cuda.md, "CUTLASS").
/// For the walks that read a configuration by name on any product op.
inline constexpr llvm::StringLiteral kDeviceRowsConfig = "device_rows_config";

} // namespace modc::cuda

#endif // MODC_DIALECT_MODK_CUDATARGETS_H
