//===- ModkDialect.h - The kernel-level MoD dialect ---------------*- C++ -*-===//
#ifndef MODC_DIALECT_MODK_MODKDIALECT_H
#define MODC_DIALECT_MODK_MODKDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "modc/Dialect/Modk/ModkDialect.h.inc"
#include "modc/Dialect/Modk/ModkEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "modc/Dialect/Modk/ModkAttrs.h.inc"

#define GET_OP_CLASSES
#include "modc/Dialect/Modk/ModkOps.h.inc"

#endif // MODC_DIALECT_MODK_MODKDIALECT_H
