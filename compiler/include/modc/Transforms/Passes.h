//===- Passes.h - Passes of the modc compiler ---------------------*- C++ -*-===//
#ifndef MODC_TRANSFORMS_PASSES_H
#define MODC_TRANSFORMS_PASSES_H

#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace modc {

#define GEN_PASS_DECL
#include "modc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "modc/Transforms/Passes.h.inc"

/// The pipeline from a `mod.model` to a memory-planned `modk.entry`; the
/// same one `mod-opt --mod-to-modk` and `modc` run. `bf16Storage` false
/// keeps a bf16 model's buffers f32 arrays (modk-store-bf16 skipped), to
/// compare with.
void buildModToModkPipeline(mlir::OpPassManager &pm, bool bf16Storage = true);

/// Registers the passes and the named `mod-to-modk` pipeline.
void registerModcPassesAndPipelines();

} // namespace modc

#endif // MODC_TRANSFORMS_PASSES_H
