//===- ModDialect.h - The model-level MoD dialect -----------------*- C++ -*-===//
#ifndef MODC_DIALECT_MOD_MODDIALECT_H
#define MODC_DIALECT_MOD_MODDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "modc/Dialect/ModelChoices.h"
#include "modc/Dialect/Mod/ModDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "modc/Dialect/Mod/ModAttrs.h.inc"

#define GET_OP_CLASSES
#include "modc/Dialect/Mod/ModOps.h.inc"

namespace modc::mod {
/// Names of the parameters of docs/model-format.md section 2, in one place so
/// every layer agrees.
std::string blockParam(int64_t layer, llvm::StringRef suffix);
} // namespace modc::mod

#endif // MODC_DIALECT_MOD_MODDIALECT_H
