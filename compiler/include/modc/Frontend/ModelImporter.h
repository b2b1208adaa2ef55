//===- ModelImporter.h - Model description (JSON) to mod IR -------*- C++ -*-===//
//
// Reads the model description of docs/model-format.md section 1, validates
// every field and builds a `mod.model` op. Errors name the offending key (and
// the line and column for JSON syntax errors).
//
//===----------------------------------------------------------------------===//
#ifndef MODC_FRONTEND_MODELIMPORTER_H
#define MODC_FRONTEND_MODELIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace modc {
namespace mod {
class ModelOp;
}

/// Parses `text` (the contents of `filename`) into a module holding one
/// `mod.model`. Nothing is built when any field is invalid.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModelJson(llvm::StringRef text, llvm::StringRef filename,
                mlir::MLIRContext *context);

} // namespace modc

#endif // MODC_FRONTEND_MODELIMPORTER_H
