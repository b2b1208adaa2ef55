//===- fuzz_importer_mlir.cpp - Fuzz target: `.mlir` input to modc -------===//
//
// Input: a `.mlir` file, as given to `modc compile FILE.mlir`. modc parses
// it and runs the mod-to-modk pipeline on it (docs/errors.md, "`.mlir`
// input"); whatever the file holds, both must end in a diagnostic, never a
// crash. Diagnostics are swallowed: only crashes count.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <memory>

namespace {
/// As in fuzz_importer_json.cpp: recreated now and then to bound memory.
mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static unsigned uses = 0;
  if (!ctx || ++uses % 4096 == 0) {
    mlir::DialectRegistry registry;
    modc::registerAllDialects(registry);
    ctx = std::make_unique<mlir::MLIRContext>(
        registry, mlir::MLIRContext::Threading::DISABLED);
    ctx->loadAllAvailableDialects();
  }
  return *ctx;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  if (!module)
    return 0;
  mlir::PassManager pm(&ctx);
  (void)modc::buildModToModkPipeline(pm);
  (void)pm.run(*module);
  return 0;
}
