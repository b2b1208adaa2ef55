//===- ModelChoices.h - The model's enumerated choices ----------*- C++ -*-===//
//
// modc::Activation, DType, Gate, CausalRouter and Schedule, with their
// symbolize and stringify functions (ModelChoices.td).
//
//===----------------------------------------------------------------------===//
#ifndef MODC_DIALECT_MODELCHOICES_H
#define MODC_DIALECT_MODELCHOICES_H

#include "mlir/IR/DialectImplementation.h"

#include "modc/Dialect/ModelChoices.h.inc"

#endif // MODC_DIALECT_MODELCHOICES_H
