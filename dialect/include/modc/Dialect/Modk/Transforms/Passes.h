//===- Passes.h - Transforms of the modk dialect -*- C++ -*-===//
#ifndef MODC_DIALECT_MODK_TRANSFORMS_PASSES_H
#define MODC_DIALECT_MODK_TRANSFORMS_PASSES_H

#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/Pass/Pass.h"

namespace modc {

#define GEN_PASS_DECL
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"

} // namespace modc

#endif // MODC_DIALECT_MODK_TRANSFORMS_PASSES_H
