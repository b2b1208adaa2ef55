//===- InitAll.h - One registration point for every modc tool ----*- C++ -*-===//
#ifndef MODC_INITALL_H
#define MODC_INITALL_H

#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/Dialect/Modk/ModkDialect.h"
#include "modc/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/DialectRegistry.h"

namespace modc {
/// The dialects every modc tool understands (func hosts ops in op-level
/// tests).
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mod::ModDialect, modk::ModkDialect,
                  mlir::memref::MemRefDialect, mlir::func::FuncDialect>();
}
} // namespace modc

#endif // MODC_INITALL_H
