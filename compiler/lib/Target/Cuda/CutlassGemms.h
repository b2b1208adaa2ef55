//===- CutlassGemms.h - CUTLASS kernels of a CUDA package -------*- C++ -*-===//
//
// The products that modk-configure-gemms put on CUTLASS (`cutlass`
// variants of a #modk.gemm_config, `modc --cuda-gemms=cutlass`) get one
// CUTLASS kernel per distinct variant, each in a source file of its own
// (kernels/cutlass_<hash>.cu, compiled once and cached by PackageWriter),
// which the generated model.cu calls through a plain host launcher, and a
// plan that picks one by the row bound; EmitCuda.cpp calls them from the
// entries. A group of products whose variants are `grouped` gets grouped
// (ptr-array) kernels and one launch over its members. docs/cuda.md,
// "CUTLASS".
//
//===----------------------------------------------------------------------===//

#ifndef MODC_TARGET_CUDA_CUTLASSGEMMS_H
#define MODC_TARGET_CUDA_CUTLASSGEMMS_H

#include "modc/Dialect/Modk/ModkDialect.h"
#include "modc/Target/Package.h"

#include "llvm/Support/raw_ostream.h"
#include <map>

#include <string>
#include <vector>

namespace modc {

/// Whether a configuration has a CUTLASS variant.
bool hasCutlassVariant(modk::GemmConfigAttr config);

/// Whether a configuration's CUTLASS variants are a group's grouped launch
/// (`grouped`: modk-configure-gemms on a modk-group-gemms group, sm_90a).
bool isCutlassGrouped(modk::GemmConfigAttr config);

/// Whether a configuration's CUTLASS variants are CUTLASS 2.x's multistage
/// kernels (sm_80's, and an f32 product's, `tf32x3`, on every part), which
/// read the row count on the device.
bool isCutlassMultistage(modk::GemmConfigAttr config);

/// Whether any product of `entries` runs on CUTLASS (its package then
/// compiles against CUTLASS's headers).
bool usesCutlass(llvm::ArrayRef<modk::EntryOp> entries);

/// The name of the CUTLASS plan of a weight gradient (modk.gemm_wgrad)
/// whose configuration has a CUTLASS variant, else empty: a function of its
/// configuration, which CutlassGemms::emit declares under that name.
std::string cutlassWgradPlan(mlir::Operation *op);

/// The CUTLASS version modc was configured with ("4.2.0"), or empty where
/// CMake found no CUTLASS.
llvm::StringRef cutlassVersion();

/// The include directories nvcc needs for a package that uses CUTLASS (its
/// include/ and, where present, tools/util/include/), empty where CMake
/// found no CUTLASS.
std::vector<std::string> cutlassIncludeDirs();

/// The CUTLASS kernels of one package.
class CutlassGemms {
public:
  CutlassGemms(llvm::ArrayRef<modk::EntryOp> entries, llvm::StringRef arch)
      : entries(entries), arch(arch) {}

  /// Writes the CUTLASS section of model.cu (one type per distinct
  /// variant, calling its kernel file's launcher, and one plan per distinct
  /// configuration) and appends to `files` the kernel files: CUTLASS's
  /// headers, the project's kernel templates over them, the kernel type and
  /// its launcher, one file per distinct text. Nothing where no product
  /// uses CUTLASS. Fails (with a diagnostic on the product) where a variant
  /// does not fit `arch`. `onlyKernel` >= 0: only that kernel's file, to
  /// `os` (a build check of one kernel).
  mlir::LogicalResult emit(llvm::raw_ostream &os,
                           std::vector<CudaKernelFile> &files,
                           int onlyKernel = -1);

  /// The plan of `op`'s configuration, or empty where it has no CUTLASS
  /// variant or its variants are grouped (groupPlanOf).
  std::string planOf(mlir::Operation *op) const;

  /// The grouped plan (modc_cutlass::GroupPlan) of a group member's
  /// configuration, or empty where its variants are not grouped: the
  /// group's one launch (modc_cutlass::linear_group).
  std::string groupPlanOf(mlir::Operation *op) const;

  /// The grouped plan of a forward product's device_rows_config (a
  /// one-member grouped launch over the rows the device counts, where its
  /// epilogue must not touch a row past the count), or empty where it has
  /// none.
  std::string deviceRowsPlanOf(mlir::Operation *op) const;

private:
  std::string anyPlanOf(mlir::Operation *op,
                        llvm::StringRef attribute = "config") const;
  mlir::LogicalResult emitKernelType(llvm::raw_ostream &os,
                                     const modk::GemmVariant &v,
                                     bool bf16Output, const std::string &name,
                                     mlir::Operation *op);

  llvm::ArrayRef<modk::EntryOp> entries;
  std::string arch;
  std::map<std::string, std::string> plans;
  /// Whether a product with a `rows` epilogue runs on CUTLASS.
  bool hasEpilogue = false;
  /// Whether one of them stores by itself (its StoreArgs).
  bool hasStore = false;
  /// Whether an input gradient (modk.gemm_dgrad) runs on CUTLASS.
  bool hasDgrad = false;
  /// Whether a weight gradient (modk.gemm_wgrad) runs on CUTLASS.
  bool hasWgrad = false;
  /// Whether a group runs as one CUTLASS grouped launch.
  bool hasGroup = false;
};

} // namespace modc

#endif // MODC_TARGET_CUDA_CUTLASSGEMMS_H
