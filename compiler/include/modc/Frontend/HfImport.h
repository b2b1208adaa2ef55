//===- HfImport.h - Hugging Face Llama checkpoints to modc models -*- C++
//-*-===//
//
// `modc import-hf`: reads a Llama-architecture checkpoint directory of the
// Hugging Face ecosystem (config.json plus model.safetensors or a sharded
// model.safetensors.index.json) and produces a model description
// (docs/model-format.md section 1) and a weights file with the parameters of
// section 2, optionally with Mixture-of-Depths routing added. The mapping and
// the routers' initial values are described in docs/huggingface.md.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_FRONTEND_HFIMPORT_H
#define MODC_FRONTEND_HFIMPORT_H

#include "modrt/Tensor.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>

namespace modc {

/// What `modc import-hf` was asked for. Unset optionals take the defaults of
/// docs/huggingface.md.
struct HfImportOptions {
  std::string checkpointDir;
  /// The model's name; empty: the checkpoint directory's name, with
  /// characters outside [A-Za-z0-9._-] replaced by '-'.
  std::string name;
  /// seq_len; unset: min(max_position_embeddings, kDefaultMaxSeqLen).
  std::optional<int64_t> seqLen;
  std::string dtype = "f32";
  // Mixture-of-Depths: on iff capacity or capacityTokens is set.
  std::optional<double> capacity;
  std::optional<int64_t> capacityTokens;
  std::string schedule = "every_other"; ///< every_other|all|none|"1,3,5"
  std::string gate = "sigmoid";
  std::string causalRouter = "predictor";
  std::optional<double> auxLossWeight;
  std::optional<int64_t> predictorHidden;
  /// Seed of the predictors' initial values (modrun init's streams).
  uint64_t seed = 0;
  /// Where progress lines go (stderr in modc); null: nowhere.
  llvm::raw_ostream *progress = nullptr;
};

/// The largest seq_len import-hf picks by itself (docs/huggingface.md).
constexpr int64_t kDefaultMaxSeqLen = 1024;

/// A converted checkpoint, not yet written.
struct HfImportResult {
  std::string modelJson;    ///< the model description, ends in a newline
  modrt::TensorMap weights; ///< F32, in docs/model-format.md section 2 order
};

/// Reads and converts the checkpoint. Every refusal names the file and the
/// key or tensor at fault.
llvm::Expected<HfImportResult> importHfCheckpoint(const HfImportOptions &opts);

/// Writes both outputs atomically: each goes to a temporary file first and is
/// renamed into place; on failure neither temporary file is left behind.
llvm::Error writeHfImport(const HfImportResult &result,
                          const std::string &modelPath,
                          const std::string &weightsPath);

} // namespace modc

#endif // MODC_FRONTEND_HFIMPORT_H
