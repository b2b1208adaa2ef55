//===- Pipelines.h - The mod-to-modk pipeline and registration -*- C++ -*-===//
#ifndef MODC_PIPELINES_PIPELINES_H
#define MODC_PIPELINES_PIPELINES_H

#include "modc/Conversion/ModToModk/Passes.h"
#include "modc/Dialect/Mod/Transforms/Passes.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

namespace modc {

/// The choices modc's options make in the pipeline.
struct PipelineOptions {
  /// false: modk-store-bf16 with activations=false (modc --f32-activations):
  /// a bf16 model's buffers stay f32 arrays holding the same values.
  bool bf16Storage = true;
  /// mod-fuse-routing and mod-fuse-residual (modc
  /// --no-fuse=routing,residual).
  bool fuseRouting = true;
  bool fuseResidual = true;
  /// modk-fuse-epilogues' fusions (modc --no-fuse=residual-add,activation).
  bool fuseResidualAdd = true;
  bool fuseActivation = true;
  bool fuseRowEpilogues = true;
  /// modk-fuse-router-norm (modc --no-fuse=router-norm).
  bool fuseRouterNorm = true;
  /// modk-fuse-horizontal (modc --no-fuse=horizontal); CPU targets only.
  bool fuseHorizontal = true;
  /// modk-fuse-select-gather (modc --no-fuse=select-gather).
  bool fuseSelectGather = true;
  /// modk-fuse-copies (modc --no-fuse=copy).
  bool fuseCopies = true;
  /// modk-fold-zero-fills (modc --no-fuse=zero-fill); CPU targets only.
  bool foldZeroFills = true;
  /// modk-group-gemms (modc --no-fuse=group).
  bool groupGemms = true;
  /// modk-group-siblings (modc --no-fuse=siblings); CUDA targets only.
  bool groupSiblings = true;
  /// modk-keep-bf16-weights (CUDA targets; modc --f32-weights sets false).
  bool bf16WeightCopies = true;
  /// A CUDA target: modk-configure-gemms' options (arch=sm_90a and any
  /// pinned choice, `modc --arch`, `--cuda-gemms`). Empty: a CPU target,
  /// whose products need no configuration.
  std::string cudaGemms;
};

/// The pipeline from a `mod.model` to a memory-planned `modk.entry`; the
/// same one `mod-opt --mod-to-modk` and `modc` run. Fails (with a message
/// on `errors`) where options.cudaGemms is not a valid option string.
mlir::LogicalResult buildModToModkPipeline(mlir::OpPassManager &pm,
                                           const PipelineOptions &options = {},
                                           llvm::raw_ostream &errors =
                                               llvm::errs());

/// Registers every pass (the mod and modk transforms and the conversion)
/// and the named `mod-to-modk` pipeline.
void registerModcPassesAndPipelines();

} // namespace modc

#endif // MODC_PIPELINES_PIPELINES_H
