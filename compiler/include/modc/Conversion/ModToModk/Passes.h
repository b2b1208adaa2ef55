//===- Passes.h - mod to modk conversion -*- C++ -*-===//
#ifndef MODC_CONVERSION_MODTOMODK_PASSES_H
#define MODC_CONVERSION_MODTOMODK_PASSES_H

#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/Pass/Pass.h"

namespace modc {

#define GEN_PASS_DECL
#include "modc/Conversion/ModToModk/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "modc/Conversion/ModToModk/Passes.h.inc"

/// The typed form of `model`'s configuration, as each modk.entry carries
/// it. Null, with an error at the model, when it is no valid #modk.model.
modk::ModelAttr modelAttrOf(mod::ModelOp model);

} // namespace modc

#endif // MODC_CONVERSION_MODTOMODK_PASSES_H
