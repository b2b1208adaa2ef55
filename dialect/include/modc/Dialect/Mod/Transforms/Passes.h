//===- Passes.h - Transforms of the mod dialect -*- C++ -*-===//
#ifndef MODC_DIALECT_MOD_TRANSFORMS_PASSES_H
#define MODC_DIALECT_MOD_TRANSFORMS_PASSES_H

#include "modc/Dialect/Mod/ModDialect.h"

#include "mlir/Pass/Pass.h"

namespace modc {

#define GEN_PASS_DECL
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"

} // namespace modc

#endif // MODC_DIALECT_MOD_TRANSFORMS_PASSES_H
