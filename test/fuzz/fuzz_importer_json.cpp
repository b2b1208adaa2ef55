//===- fuzz_importer_json.cpp - Fuzz target: the model description -------===//
//
// Input: a model description (docs/model-format.md section 1), as given to
// `modc compile MODEL.json`. importModelJson must refuse anything invalid
// with an llvm::Error naming the key, never crash. A description it accepts
// must verify, and its normalised form (what the manifest records) must
// import again to the same normalised form.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/Conversion/ModToModk/Passes.h"
#include "modc/Frontend/ModelImporter.h"
#include "modc/Target/Package.h"
#include "modc/InitAll.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FormatVariadic.h"

#include <memory>

namespace {
/// A context, recreated now and then: it keeps every attribute it has
/// uniqued, which would grow without bound over a long run.
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

modc::mod::ModelOp theModel(mlir::ModuleOp module) {
  modc::mod::ModelOp model;
  module.walk([&](modc::mod::ModelOp m) { model = m; });
  fuzz::require(bool(model), "an imported module holds a mod.model");
  return model;
}
/// What the manifest records of `model`: its #modk.model attribute,
/// printed as JSON.
std::string normalised(modc::mod::ModelOp model) {
  modc::modk::ModelAttr attr = modc::modelAttrOf(model);
  fuzz::require(bool(attr), "an imported model is a valid #modk.model");
  return llvm::formatv("{0}", llvm::json::Value(modc::manifestModel(attr)));
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  mlir::MLIRContext &ctx = context();
  auto imported = modc::importModelJson(text, "fuzz.json", &ctx);
  if (!imported) {
    llvm::consumeError(imported.takeError());
    return 0;
  }
  mlir::ModuleOp module = imported->get();
  fuzz::require(mlir::succeeded(mlir::verify(module)),
                "an imported model verifies");
  std::string normal = normalised(theModel(module));
  auto again = modc::importModelJson(normal, "normal.json", &ctx);
  if (!again) {
    std::fprintf(stderr, "%s\n%s\n", normal.c_str(),
                 llvm::toString(again.takeError()).c_str());
    fuzz::require(false, "the normalised description imports");
  }
  fuzz::require(normalised(theModel(again->get())) == normal,
                "normalising is idempotent");
  return 0;
}
