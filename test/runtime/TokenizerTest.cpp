//===- TokenizerTest.cpp - Byte and BPE tokenizers, streaming UTF-8 -------===//
//
// The BPE must give exactly the ids Hugging Face `tokenizers` gives: the
// fixtures in test/data/tokenizer were written by
// scripts/make-test-tokenizer.py with `tokenizers` (expected.json holds its
// ids and decodings), four pre-tokenizer set-ups, 41 strings each (16 chosen,
// 25 random mixtures of numerals of every kind, Unicode spaces,
// contractions, emoji and special tokens). Then the byte tokenizer, Utf8Stream
// and the errors of reading a tokenizer.json.
//
//===----------------------------------------------------------------------===//
#include "modrt/Tokenizer.h"
#include "TestUtil.h"
#include "modrt/Error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

using namespace modrt;
using namespace modrt_test;

namespace {

const std::string kDir = TEST_DATA_DIR "/tokenizer";

nlohmann::json expected() {
  std::ifstream in(kDir + "/expected.json");
  return nlohmann::json::parse(in);
}

/// Whether `s` is valid UTF-8.
bool validUtf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || i + len > s.size())
      return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80)
        return false;
    i += len;
  }
  return true;
}

/// A small valid tokenizer.json to break one key at a time.
nlohmann::json minimal() {
  nlohmann::json vocab = nlohmann::json::object();
  // The 256 byte-level symbols, then "ab".
  int id = 0, extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    uint32_t cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    vocab[s] = id++;
  }
  vocab["ab"] = id++;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", id},
             {"content", "<|end|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", {"a b"}}}}};
}

::testing::AssertionResult refused(const nlohmann::json &j,
                                   std::vector<std::string> pieces) {
  return throwsError([&] { Tokenizer::fromJson(j.dump(), "tok.json"); },
                     pieces);
}

} // namespace

TEST(TokenizerTest, MatchesHuggingFaceTokenizers) {
  nlohmann::json all = expected();
  ASSERT_EQ(all.size(), 4u);
  for (auto it = all.begin(); it != all.end(); ++it) {
    SCOPED_TRACE(it.key());
    Tokenizer tok = Tokenizer::fromFile(kDir + "/" + it.key());
    EXPECT_FALSE(tok.isBytes());
    EXPECT_EQ(tok.vocabSize(), it.value()["vocab_size"].get<int64_t>());
    for (const auto &c : it.value()["cases"]) {
      std::string text = c["text"];
      SCOPED_TRACE(text);
      std::vector<int32_t> ids = c["ids"];
      EXPECT_EQ(tok.encode(text), ids);
      // The decodings are stored where they differ from the text.
      std::string decoded = c.value("decoded", text);
      EXPECT_EQ(tok.decode(ids), decoded);
      EXPECT_EQ(tok.decode(ids, /*skipSpecial=*/true),
                c.value("decoded_skip_special", decoded));
    }
  }
}

TEST(TokenizerTest, SpecialTokensAreMatchedWhole) {
  Tokenizer tok = Tokenizer::fromFile(kDir + "/tokenizer.json");
  EXPECT_EQ(tok.encode("<|endoftext|>"), std::vector<int32_t>{0});
  EXPECT_TRUE(tok.isSpecial(0));
  EXPECT_FALSE(tok.isSpecial(tok.encode("a")[0]));
  EXPECT_EQ(tok.tokenBytes(0), "<|endoftext|>");
  // A near miss is ordinary text.
  std::vector<int32_t> near = tok.encode("<|endoftext|");
  EXPECT_EQ(std::count(near.begin(), near.end(), 0), 0);
  EXPECT_EQ(tok.decode(near), "<|endoftext|");
}

TEST(TokenizerTest, RoundTripsAnyBytes) {
  // Random text, random bytes (invalid UTF-8 too): decode(encode(x)) == x.
  std::mt19937 gen(7);
  const std::string alphabet[] = {"a",    "b",    " ",  "  ",
                                  "\n",   "1",    "23", "é",
                                  "日本", "🙂", "'s", "<|endoftext|>",
                                  "\t"};
  for (const char *file :
       {"tokenizer.json", "gpt2-tokenizer.json", "llama3-tokenizer.json"}) {
    Tokenizer tok = Tokenizer::fromFile(kDir + "/" + file);
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      int n = 1 + static_cast<int>(gen() % 30);
      for (int i = 0; i < n; ++i)
        text += gen() % 5 ? alphabet[gen() % std::size(alphabet)]
                          : std::string(1, static_cast<char>(gen() & 0xff));
      std::vector<int32_t> ids = tok.encode(text);
      for (int32_t id : ids)
        ASSERT_TRUE(id >= 0 && id < tok.vocabSize());
      ASSERT_EQ(tok.decode(ids), text) << file;
    }
  }
}

TEST(TokenizerTest, LongPiecesTakeNoQuadraticTime) {
  // A run of spaces or newlines is one piece of the pre-tokenizer; a
  // million of them must merge in well under the test's timeout (the
  // merges are O(n log n), as in `tokenizers`).
  Tokenizer tok = Tokenizer::fromFile(kDir + "/tokenizer.json");
  for (char c : {' ', '\n'}) {
    std::string text(1 << 20, c);
    std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text);
    if (c == ' ') // the fixture merges pairs of spaces (not of newlines)
      EXPECT_EQ(ids, std::vector<int32_t>(text.size() / 2,
                                          tok.encode("  ").front()));
  }
}

TEST(TokenizerTest, ByteTokenizer) {
  Tokenizer tok;
  EXPECT_TRUE(tok.isBytes());
  EXPECT_EQ(tok.name(), "bytes");
  EXPECT_EQ(tok.vocabSize(), 256);
  std::string text("h\xc3\xa9\x00\xff\x00", 6);
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xc3, 0xa9, 0, 0xff, 0}));
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.tokenBytes(300), "");
  EXPECT_NO_THROW(tok.checkFits(16, "m"));
}

TEST(TokenizerTest, VocabularyMustFitTheModel) {
  Tokenizer tok = Tokenizer::fromFile(kDir + "/tokenizer.json");
  EXPECT_NO_THROW(tok.checkFits(300, "pkg"));
  EXPECT_TRUE(throwsError([&] { tok.checkFits(299, "pkg"); },
                          {"pkg: the tokenizer", "tokenizer.json has 300 "
                                                 "tokens (ids up to 299), "
                                                 "more than the model's "
                                                 "vocab_size 299"}));
}

TEST(Utf8StreamTest, HoldsSplitSequences) {
  // Every split of every multi-byte character into two pushes.
  for (std::string ch : {"\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x99\x82"}) {
    for (size_t cut = 1; cut < ch.size(); ++cut) {
      Utf8Stream s;
      EXPECT_EQ(s.push("a" + ch.substr(0, cut)), "a");
      EXPECT_EQ(s.pending(), cut);
      EXPECT_EQ(s.push(ch.substr(cut) + "b"), ch + "b");
      EXPECT_EQ(s.pending(), 0u);
      EXPECT_EQ(s.flush(), "");
    }
  }
  // One byte at a time.
  Utf8Stream s;
  std::string text = "x\xf0\x9f\x99\x82y", out;
  for (char c : text) {
    std::string piece = s.push(std::string(1, c));
    EXPECT_TRUE(validUtf8(piece));
    out += piece;
  }
  EXPECT_EQ(out + s.flush(), text);
}

TEST(Utf8StreamTest, RandomPiecesGiveValidChunks) {
  std::string text = "Grüße, 日本語 🙂🚀 naïve café — ok\n";
  std::mt19937 gen(3);
  for (int trial = 0; trial < 100; ++trial) {
    Utf8Stream s;
    std::string out;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::min<size_t>(1 + gen() % 4, text.size() - i);
      std::string piece = s.push(text.substr(i, n));
      ASSERT_TRUE(validUtf8(piece));
      out += piece;
      i += n;
    }
    EXPECT_EQ(out + s.flush(), text);
  }
}

TEST(Utf8StreamTest, InvalidBytesPassAtOnce) {
  Utf8Stream s;
  EXPECT_EQ(s.push("\x80"), "\x80"); // stray continuation byte
  EXPECT_EQ(s.push("\xc3"
                   "a"),
            "\xc3"
            "a");                    // lead without continuation
  EXPECT_EQ(s.push("\xff"), "\xff"); // never valid
  EXPECT_EQ(s.push("\xe6\x97"), ""); // incomplete: held
  EXPECT_EQ(s.flush(), "\xe6\x97");  // flushed at the end
  EXPECT_EQ(s.pending(), 0u);
}

TEST(Utf8StreamTest, StreamsBpeTokens) {
  // Tokens of non-ASCII text, decoded one at a time as modrun sample does.
  Tokenizer tok = Tokenizer::fromFile(kDir + "/tokenizer.json");
  std::string text = "日本語のテキスト 🙂🚀 👍🏽 Übermäßig";
  std::vector<int32_t> ids = tok.encode(text);
  Utf8Stream s;
  std::string out;
  bool split = false;
  for (int32_t id : ids) {
    std::string bytes = tok.tokenBytes(id);
    split |= !validUtf8(bytes);
    std::string piece = s.push(bytes);
    ASSERT_TRUE(validUtf8(piece));
    out += piece;
  }
  EXPECT_TRUE(split) << "no token ends inside a character: a weak test";
  EXPECT_EQ(out + s.flush(), text);
}

TEST(TokenizerErrorsTest, Files) {
  TempDir tmp;
  EXPECT_TRUE(throwsError([&] { Tokenizer::fromFile(tmp.path("none.json")); },
                          {tmp.path("none.json"), "cannot open"}));
  EXPECT_TRUE(throwsError([&] { Tokenizer::fromFile(tmp.path("")); },
                          {"is a directory, not a tokenizer.json"}));
  writeFile(tmp.path("bad.json"), "{\"model\": ");
  EXPECT_TRUE(throwsError([&] { Tokenizer::fromFile(tmp.path("bad.json")); },
                          {tmp.path("bad.json"), "not valid JSON"}));
  writeFile(tmp.path("arr.json"), "[]");
  EXPECT_TRUE(throwsError([&] { Tokenizer::fromFile(tmp.path("arr.json")); },
                          {"must be a JSON object", "got array"}));
}

TEST(TokenizerErrorsTest, RefusesWhatItDoesNotSupport) {
  ASSERT_NO_THROW(Tokenizer::fromJson(minimal().dump(), "tok.json"));
  Tokenizer ok = Tokenizer::fromJson(minimal().dump(), "tok.json");
  EXPECT_EQ(ok.encode("abab<|end|>"), (std::vector<int32_t>{256, 256, 257}));

  nlohmann::json j = minimal();
  j["model"]["type"] = "Unigram";
  EXPECT_TRUE(refused(j, {"tok.json: model.type: 'Unigram' is not "
                          "supported (modrun reads byte-level BPE "
                          "tokenizers"}));
  j = minimal();
  j["model"].erase("merges");
  EXPECT_TRUE(refused(j, {"tok.json: model.merges: missing"}));
  j = minimal();
  j["model"]["merges"] = {"a b c"};
  EXPECT_TRUE(refused(j, {"model.merges[0]", "two symbols"}));
  j = minimal();
  j["model"]["merges"] = {"a zz"};
  EXPECT_TRUE(refused(j, {"model.merges[0]: 'zz' is not in model.vocab"}));
  j = minimal();
  j["model"]["merges"] =
      nlohmann::json::array({nlohmann::json::array({"b", "a"})});
  EXPECT_TRUE(refused(j, {"model.merges[0]: 'ba' is not in model.vocab"}));
  j = minimal();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_TRUE(refused(j, {"tok.json: normalizer: a normalizer ('NFC') is "
                          "not supported"}));
  j = minimal();
  j["model"]["byte_fallback"] = true;
  EXPECT_TRUE(refused(j, {"model.byte_fallback: byte_fallback true is not "
                          "supported"}));
  j = minimal();
  j["model"]["dropout"] = 0.1;
  EXPECT_TRUE(refused(j, {"model.dropout: BPE dropout is not supported"}));
  j = minimal();
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_TRUE(refused(j, {"model.continuing_subword_prefix"}));
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_TRUE(refused(j, {"pre_tokenizer.type: 'Whitespace' is not "
                          "supported"}));
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_TRUE(refused(j, {"pre_tokenizer: a pre-tokenizer that does not "
                          "end with ByteLevel"}));
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "(unclosed"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}}}}};
  EXPECT_TRUE(refused(j, {"pre_tokenizer.pretokenizers[0].pattern.Regex: "
                          "the regex does not compile (PCRE2)"}));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a"}};
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_TRUE(refused(j, {"pre_tokenizer.pretokenizers[0].behavior: "
                          "'Sideways' is not supported"}));
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_TRUE(refused(j, {"decoder.type: 'WordPiece' is not supported"}));
  j = minimal();
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_TRUE(refused(j, {"added_tokens[0].lstrip: lstrip true is not "
                          "supported"}));
  j = minimal();
  j["truncation"] = {{"max_length", 8}};
  EXPECT_TRUE(refused(j, {"truncation: truncation is not supported"}));
  j = minimal();
  j["extra"] = 1;
  EXPECT_TRUE(refused(j, {"tok.json: extra: the key is not supported"}));
  j = minimal();
  j["model"]["vocab"]["ab"] = -1;
  EXPECT_TRUE(refused(j, {"model.vocab[\"ab\"]: must be a token id"}));
  j = minimal();
  j["model"]["vocab"]["ab"] = 0;
  EXPECT_TRUE(refused(j, {"id 0 is given to two tokens"}));
}

TEST(TokenizerErrorsTest, UnknownByteIsAnError) {
  // A vocabulary without the symbol of byte 0xFF: encoding it fails.
  nlohmann::json j = minimal();
  j["model"]["vocab"].erase("\xc3\xbf"); // ÿ, the symbol of 0xFF
  Tokenizer tok = Tokenizer::fromJson(j.dump(), "tok.json");
  EXPECT_EQ(tok.encode("ab"), std::vector<int32_t>{256});
  EXPECT_TRUE(
      throwsError([&] { tok.encode("a\xff"); },
                  {"tok.json: byte 0xFF has no token", "byte_fallback"}));
}
