//===- Pipelines.cpp - The mod-to-modk pipeline and registration -*- C++ -*-===//

#include "modc/Pipelines/Pipelines.h"

using namespace mlir;

LogicalResult modc::buildModToModkPipeline(OpPassManager &pm,
                                           const PipelineOptions &options,
                                           llvm::raw_ostream &errors) {
  OpPassManager &model = pm.nest<mod::ModelOp>();
  model.addPass(createExpandSchedule());
  model.addPass(createExpandBlocks());
  FuseRoutingOptions routing;
  routing.enabled = options.fuseRouting;
  model.addPass(createFuseRouting(routing));
  FuseResidualOptions residual;
  residual.enabled = options.fuseResidual;
  model.addPass(createFuseResidual(residual));
  // Each entry goes right after the model: eval first keeps it last.
  pm.addPass(createGenerateEval());
  pm.addPass(createGenerateGrad());
  pm.addPass(createGenerateDecode());
  pm.addPass(createConvertModToModk());
  pm.addPass(createGenerateOptimizer());
  OpPassManager &entry = pm.nest<modk::EntryOp>();
  FuseEpiloguesOptions fuse;
  fuse.residualAdd = options.fuseResidualAdd;
  fuse.activation = options.fuseActivation;
  entry.addPass(createFuseEpilogues(fuse));
  StoreBf16ActivationsOptions bf16;
  bf16.activations = options.bf16Storage;
  // CUDA's backward products read bf16 operands through TMA: worth a copy
  // of a gradient that other kernels also update.
  bf16.productCopies = options.bf16Storage && !options.cudaGemms.empty();
  entry.addPass(createStoreBf16Activations(bf16));
  FuseRouterNormOptions routerNorm;
  routerNorm.enabled = options.fuseRouterNorm;
  entry.addPass(createFuseRouterNorm(routerNorm));
  entry.addPass(createGeneralize());
  FuseRowEpiloguesOptions rowEpilogues;
  rowEpilogues.enabled = options.fuseRowEpilogues;
  // What modk-fuse-epilogues was told to leave out stays out.
  rowEpilogues.ownRows = options.fuseResidualAdd && options.fuseActivation;
  entry.addPass(createFuseRowEpilogues(rowEpilogues));
  // A CUDA product finishes each member's epilogue in its tiles, which a
  // stacked product would store and read again: CPU targets only.
  FuseHorizontalOptions horizontal;
  horizontal.enabled = options.fuseHorizontal && options.cudaGemms.empty();
  entry.addPass(createFuseHorizontal(horizontal));
  FuseSelectGatherOptions selectGather;
  selectGather.enabled = options.fuseSelectGather;
  entry.addPass(createFuseSelectGather(selectGather));
  FuseCopiesOptions copies;
  copies.enabled = options.fuseCopies;
  entry.addPass(createFuseCopies(copies));
  // One launch (CUDA) or parallel region (CPU) for independent products of
  // one shape, the MoE experts: before memory planning, which sees the
  // products where they now run.
  GroupGemmsOptions group;
  group.enabled = options.groupGemms;
  entry.addPass(createGroupGemms(group));
  // The CUDA weight gradient kernels always add: CPU targets only.
  if (options.cudaGemms.empty()) {
    FoldZeroFillsOptions zeroFills;
    zeroFills.enabled = options.foldZeroFills;
    entry.addPass(createFoldZeroFills(zeroFills));
  }
  entry.addPass(createPlanMemory());
  if (options.cudaGemms.empty())
    return success();
  std::unique_ptr<Pass> configure = createConfigureGemms();
  if (failed(configure->initializeOptions(
          options.cudaGemms, [&](const Twine &message) {
            errors << "modk-configure-gemms: " << message << "\n";
            return failure();
          })))
    return failure();
  entry.addPass(std::move(configure));
  // A decode step's products of one input as one few-row launch, where
  // their configurations take that kernel.
  GroupSiblingsOptions siblings;
  siblings.enabled = options.groupSiblings;
  entry.addPass(createGroupSiblings(siblings));
  // The products' configurations say which weights they read as bf16.
  KeepBf16WeightsOptions weightCopies;
  weightCopies.enabled = options.bf16WeightCopies;
  pm.addPass(createKeepBf16Weights(weightCopies));
  return success();
}

void modc::registerModcPassesAndPipelines() {
  registerModTransformsPasses();
  registerModkTransformsPasses();
  registerModToModkPasses();
  PassPipelineRegistration<>(
      "mod-to-modk",
      "Lower a mod.model to a memory-planned modk.entry (what modc runs)",
      [](OpPassManager &pm) { (void)buildModToModkPipeline(pm); });
}
