//===- Tokenizer.h - Byte-level and byte-level BPE tokenizers ---*- C++ -*-===//
//
// Text to token ids and back (docs/runtime.md, "Tokenizers"). Two kinds:
//
// - the byte tokenizer, the default: token = byte value, vocabulary 256
//   (docs/model-format.md section 6);
// - a byte-level BPE read from a Hugging Face tokenizer.json, as GPT-2,
//   Llama 3 and SmolLM2 ship it: vocab and merges, the pre-tokenizer's
//   Split / Digits / ByteLevel steps (Unicode regexes run by PCRE2), added
//   and special tokens matched literally before pre-tokenization and never
//   merged. It encodes as `tokenizers`' encode(text,
//   add_special_tokens=False) does. Whatever else the file asks for (a
//   normalizer, another model type, dropout, ...) is refused with an Error
//   naming the key.
//
// Tokens decode to bytes: a BPE token to the bytes its byte-level symbols
// stand for, an added token to its text. A token may end inside a UTF-8
// sequence; Utf8Stream holds such bytes back while streaming.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_TOKENIZER_H
#define MODRT_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace modrt {

class Tokenizer {
public:
  /// The byte tokenizer: token = byte value, 256 tokens.
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;

  /// Reads a Hugging Face tokenizer.json holding a byte-level BPE. Throws
  /// Error naming the file and the key it cannot read or does not support.
  static Tokenizer fromFile(const std::string &path);
  /// The same from JSON text; `where` names it in messages.
  static Tokenizer fromJson(const std::string &text, const std::string &where);

  /// Whether this is the byte tokenizer (token = byte value).
  bool isBytes() const { return impl_ == nullptr; }
  /// "bytes", or the path or name the BPE was read from.
  const std::string &name() const;
  /// One more than the largest token id (256 for the byte tokenizer): the
  /// model's vocab_size must be at least this.
  int64_t vocabSize() const;

  /// Token ids of `text`. Text that is not valid UTF-8 is accepted: bytes
  /// no pre-tokenizer pattern matches form pieces of their own and encode
  /// through their byte-level symbols, so decode() gives them back.
  std::vector<int32_t> encode(const std::string &text) const;
  /// The bytes of token `id`: its byte-level symbols turned back into bytes,
  /// or an added token's text. Empty for an id the tokenizer does not have
  /// (ids in [0, vocabSize()) that name no token, or outside it).
  std::string tokenBytes(int32_t id) const;
  /// Whether `id` is a special added token (`"special": true`).
  bool isSpecial(int32_t id) const;
  /// The bytes of `ids` one after another; special tokens are left out when
  /// `skipSpecial` (their text is kept otherwise, as is the text of added
  /// tokens that are not special).
  std::string decode(const std::vector<int32_t> &ids,
                     bool skipSpecial = false) const;

  /// Throws Error unless the model's vocabulary (vocab_size) holds every
  /// token id (vocabSize() <= vocab_size); `where` names the model. The
  /// byte tokenizer is not checked here: tokenizePrompt names a byte that
  /// is outside a smaller vocabulary.
  void checkFits(int64_t modelVocab, const std::string &where) const;

  struct Impl;

private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Streams bytes as complete UTF-8: push() returns what can be printed now
/// and holds back an incomplete UTF-8 sequence at the end (at most 3
/// bytes) until the bytes that complete it arrive; flush() returns what is
/// held. Bytes that can never be valid UTF-8 (a stray continuation byte, a
/// lead byte followed by a non-continuation byte) are passed on at once
/// rather than held.
class Utf8Stream {
public:
  std::string push(const std::string &bytes);
  std::string flush();
  /// Bytes held back now.
  size_t pending() const { return held_.size(); }

private:
  std::string held_;
};

} // namespace modrt

#endif // MODRT_TOKENIZER_H
