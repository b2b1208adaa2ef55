//===- Package.h - Manifest, C++ emission and package writing -----*- C++ -*-===//
#ifndef MODC_TARGET_PACKAGE_H
#define MODC_TARGET_PACKAGE_H

#include "modc/Dialect/Modk/ModkDialect.h"
#include "modrt/abi.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace modc {

/// Version of the package ABI this compiler writes: the runtime's own.
constexpr unsigned kPackageAbiVersion = MODC_ABI_VERSION;

/// The width of a token's key (and value) row: n_kv_heads heads of
/// head_dim, d_model without grouped-query attention (docs/model-format.md
/// section 3).
inline int64_t kvWidth(modk::ModelAttr model) {
  return model.getKvHeads() * model.getHeadDim();
}

/// KV-cache bytes a decode step keeps per sequence: K and V of up to seq_len
/// tokens in every layer, rows of `kvWidth`, as f32, or as bf16 in a bf16
/// model.
inline int64_t kvCacheBytesPerSequence(int64_t layers, int64_t seqLen,
                                       int64_t kvWidth, bool bf16) {
  return layers * 2 * seqLen * kvWidth * (bf16 ? 2 : int64_t(sizeof(float)));
}

/// The instruction set a CPU package is compiled for: the `-march` value and
/// the CPU features it turns on (names of runtime/include/modrt/CpuFeatures.h).
struct CpuIsa {
  std::string march;
  std::vector<std::string> features;
};

/// Asks the C++ compiler `cxx` which CPU features `-march=<march>` enables
/// (its predefined macros). Fails, naming the value, when the compiler
/// rejects it.
llvm::Expected<CpuIsa> queryCpuIsa(llvm::StringRef cxx, llvm::StringRef march);

/// A package's entries by kind (#modk.entry_kind): one of each at most,
/// null where the package has none of that kind.
struct PackageEntries {
  modk::EntryOp forward, grad, decode, eval, evalCausal;
  /// The member that holds the entry of `kind`.
  modk::EntryOp &of(modk::EntryKind kind);
};

/// The manifest's `model` object: the normalised model description
/// (docs/model-format.md, section 1), with the keys of the model file.
llvm::json::Object manifestModel(modk::ModelAttr model);

/// The manifest.json text of a package built from its entries: @forward and,
/// when present, @grad and @decode (docs/internals.md). `arch` is the CUDA
/// architecture of a cuda package ("" for cpu); `cpuIsa`, when given, is
/// recorded as the manifest's "cpu" object.
std::string buildManifest(llvm::ArrayRef<modk::EntryOp> entries,
                          llvm::StringRef target, llvm::StringRef arch = "",
                          const CpuIsa *cpuIsa = nullptr);

/// Writes the C++ source of the package for the single modk.entry in
/// `module`: the kernel prelude, then one specialised function per kernel.
/// `cpuIsa` goes into the embedded manifest (a package needs it; without it
/// the runtime refuses the library).
mlir::LogicalResult emitCpp(mlir::ModuleOp module, llvm::raw_ostream &os,
                            const CpuIsa *cpuIsa = nullptr);

/// Registers the `modk-to-cpp` translation of mod-translate.
void registerModkToCppTranslation();

/// Whether the CUDA emitter supports `arch` (sm_90a, sm_80).
bool isSupportedCudaArch(llvm::StringRef arch);

/// A source file of a CUDA package besides model.cu: a CUTLASS kernel and
/// its host launcher, a translation unit of its own (docs/cuda.md,
/// "CUTLASS").
struct CudaKernelFile {
  std::string path; ///< in the package: kernels/cutlass_<hash>.cu
  std::string text;
};

/// Writes the CUDA source of the package: the CUDA kernel preludes, the
/// device API (modc_cuda_*), then one host function per entry that enqueues
/// the plan's kernels. The CUTLASS kernels it calls go into `kernelFiles`;
/// without it (--emit=source), where there are any, model.cu and each of
/// them follow a line `//--- PATH` (split-file's format).
mlir::LogicalResult
emitCuda(mlir::ModuleOp module, llvm::raw_ostream &os, llvm::StringRef arch,
         std::vector<CudaKernelFile> *kernelFiles = nullptr);

/// Registers the `modk-to-cuda` translation of mod-translate.
void registerModkToCudaTranslation();

struct PackageOptions {
  std::string outputDir;
  std::string target = "cpu";  ///< "cpu" or "cuda"
  std::string cxx = "c++";     ///< host C++ compiler
  std::string cpuArch = "native";
  std::string nvcc = "nvcc";   ///< CUDA compiler (target cuda)
  std::string cudaArch = "sm_90a";
  /// nvcc's processes at once (model.cu and the CUTLASS kernel files) and
  /// the threads of model.cu's --split-compile; 0: one per CPU.
  unsigned cudaJobs = 0;
  /// The kernel cache's directory (docs/cuda.md, "Compile time"); empty:
  /// the default ($MODC_CACHE_DIR, $XDG_CACHE_HOME/modc/kernels,
  /// ~/.cache/modc/kernels).
  std::string kernelCacheDir;
  /// False: every CUTLASS kernel is compiled, none stored.
  bool kernelCache = true;
  /// Tests only: build a cuda package's source with the host C++ compiler
  /// against the CPU emulation of CUDA found in this directory
  /// (test/cuda_emu), so the whole package runs where no GPU exists.
  std::string cudaEmulationDir;
  /// Tests only: the emulated build's optimisation level, -O<this> (0, 1,
  /// 2, 3, g or s: modc checks --cuda-emulation-opt).
  std::string cudaEmulationOpt = "g";
  /// A tokenizer.json (checked by the caller) that the package holds as
  /// tokenizer.json, named by its manifest's "tokenizer" key
  /// (docs/model-format.md section 6); empty: none.
  std::string tokenizerFile;
  bool keepTemp = false;
  bool verbose = false;
};

/// Builds a package directory from a memory-planned module: writes the
/// source into a temporary directory beside `outputDir`, compiles it (C++ for
/// target cpu, CUDA with nvcc for target cuda), writes the manifest and
/// renames the directory into place. On failure nothing is left at
/// `outputDir` (an old package there is kept untouched).
llvm::Error writePackage(mlir::ModuleOp module, const PackageOptions &opts);

} // namespace modc

#endif // MODC_TARGET_PACKAGE_H
