//===- Package.h - Manifest, C++ emission and package writing -----*- C++ -*-===//
#ifndef MODC_TARGET_PACKAGE_H
#define MODC_TARGET_PACKAGE_H

#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace modc {

/// Version of the package ABI this compiler writes (runtime/include/modrt/abi.h).
constexpr unsigned kPackageAbiVersion = 4;

/// KV-cache bytes a decode step keeps per sequence: K and V of up to seq_len
/// tokens in every layer.
inline int64_t kvCacheBytesPerSequence(int64_t layers, int64_t seqLen,
                                       int64_t dModel) {
  return layers * 2 * seqLen * dModel * int64_t(sizeof(float));
}

/// The manifest.json text of a package built from its entries: @forward and,
/// when present, @grad (docs/internals.md).
std::string buildManifest(llvm::ArrayRef<modk::EntryOp> entries,
                          llvm::StringRef target);

/// Writes the C++ source of the package for the single modk.entry in
/// `module`: the kernel prelude, then one specialised function per kernel.
mlir::LogicalResult emitCpp(mlir::ModuleOp module, llvm::raw_ostream &os);

/// Registers the `modk-to-cpp` translation of mod-translate.
void registerModkToCppTranslation();

struct PackageOptions {
  std::string outputDir;
  std::string cxx = "c++";     ///< host C++ compiler
  std::string cpuArch = "native";
  bool keepTemp = false;
  bool verbose = false;
};

/// Builds a package directory from a memory-planned module: writes the
/// source into a temporary directory beside `outputDir`, compiles it, writes
/// the manifest and renames the directory into place. On failure nothing is
/// left at `outputDir` (an old package there is kept untouched).
llvm::Error writeCpuPackage(mlir::ModuleOp module, const PackageOptions &opts);

} // namespace modc

#endif // MODC_TARGET_PACKAGE_H
