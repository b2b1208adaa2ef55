//===- fuzz_tokenizer.cpp - Fuzz target: tokenizer.json and encoding ------===//
//
// Input: the text of a Hugging Face tokenizer.json, optionally followed by a
// NUL byte and a text to encode (docs/runtime.md, "Tokenizers"). Reading
// must refuse what it does not support with modrt::Error; a tokenizer it
// accepts must encode the text to ids in [0, vocabSize()) or refuse it with
// modrt::Error (a byte without a token), and streaming the tokens' bytes
// through a Utf8Stream must give decode()'s bytes.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "modrt/Error.h"
#include "modrt/Tokenizer.h"

#include <cstring>

using namespace modrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = reinterpret_cast<const char *>(data);
  const void *nul = std::memchr(p, '\0', size);
  size_t jsonSize =
      nul ? static_cast<size_t>(static_cast<const char *>(nul) - p) : size;
  std::string json(p, jsonSize);
  std::string text =
      nul ? std::string(p + jsonSize + 1, size - jsonSize - 1)
          : std::string("Hello, wörld 12³ 日本 🙂 <|endoftext|>");
  Tokenizer tok;
  std::vector<int32_t> ids;
  try {
    tok = Tokenizer::fromJson(json, "fuzz/tokenizer.json");
    ids = tok.encode(text);
  } catch (const Error &) {
    return 0;
  }
  for (int32_t id : ids)
    fuzz::require(id >= 0 && id < tok.vocabSize(), "ids are in the vocabulary");
  Utf8Stream stream;
  std::string streamed;
  for (int32_t id : ids)
    streamed += stream.push(tok.tokenBytes(id));
  streamed += stream.flush();
  fuzz::require(streamed == tok.decode(ids),
                "streaming the tokens gives the decoded bytes");
  return 0;
}
