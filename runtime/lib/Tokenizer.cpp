//===- Tokenizer.cpp - Byte-level and byte-level BPE tokenizers ----------===//
//
// The BPE follows Hugging Face `tokenizers` (docs/runtime.md, "Tokenizers"):
// added tokens are cut out of the text first (leftmost, longest); every
// other stretch goes through the pre-tokenizer steps, each splitting the
// pieces of the one before; each piece becomes bytes, one initial symbol
// per byte, and the merges apply lowest rank first (leftmost first among
// equal ranks) until none applies.
//
// Vocabulary entries are kept as the raw bytes their byte-level symbols
// stand for (GPT-2's table of 256 printable characters), so the merges work
// on bytes and the regexes see the text itself.
//
//===----------------------------------------------------------------------===//
#include "modrt/Tokenizer.h"
#include "modrt/Error.h"
#include "modrt/Files.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <queue>
#include <unordered_map>

using namespace modrt;
using json = nlohmann::json;

namespace {

/// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for
/// themselves, the other 68 bytes for U+0100 upwards, in byte order.
struct ByteLevelTable {
  uint32_t byteToCp[256];
  std::unordered_map<uint32_t, uint8_t> cpToByte;
  ByteLevelTable() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                       (b >= 174 && b <= 255);
      byteToCp[b] = printable ? b : 256 + extra++;
      cpToByte[byteToCp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTable &byteLevel() {
  static const ByteLevelTable table;
  return table;
}

/// The code points of valid UTF-8 `s`, or nullopt.
std::optional<std::vector<uint32_t>> codePoints(const std::string &s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int len = c < 0x80         ? 1
              : (c >> 5) == 6  ? 2
              : (c >> 4) == 14 ? 3
              : (c >> 3) == 30 ? 4
                               : 0;
    if (len == 0 || i + len > s.size())
      return std::nullopt;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xc0) != 0x80)
        return std::nullopt;
      cp = (cp << 6) | (d & 0x3f);
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

/// The bytes a string of byte-level symbols stands for, or nullopt when a
/// character is not one of the 256 symbols.
std::optional<std::string> symbolsToBytes(const std::string &symbols) {
  auto cps = codePoints(symbols);
  if (!cps)
    return std::nullopt;
  std::string out;
  const auto &map = byteLevel().cpToByte;
  for (uint32_t cp : *cps) {
    auto it = map.find(cp);
    if (it == map.end())
      return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

/// A compiled PCRE2 pattern (UTF, Unicode properties for \s, \p{L}, ...;
/// invalid UTF-8 in a subject matches nothing instead of failing).
class Regex {
public:
  Regex(const std::string &pattern, const std::string &what) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                        pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code,
                        &offset, nullptr);
    if (!re_)
      throw Error(fmt::format("{}: the regex does not compile (PCRE2): {} at "
                              "offset {}",
                              what, message(code), offset));
    (void)pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE); // speed only
  }
  ~Regex() { pcre2_code_free(re_); }
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  /// The non-overlapping matches in `s`, left to right; an empty match
  /// moves the search one character on.
  std::vector<std::pair<size_t, size_t>> findAll(const std::string &s) const {
    std::vector<std::pair<size_t, size_t>> out;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re_, nullptr);
    if (!md)
      throw Error("tokenizer: out of memory for a regex match");
    size_t start = 0;
    while (start <= s.size()) {
      int rc = pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()),
                           s.size(), start, 0, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH)
        break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        throw Error(
            fmt::format("tokenizer: regex match failed: {}", message(rc)));
      }
      const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (e > b) {
        out.emplace_back(b, e);
        start = e;
      } else {
        if (b >= s.size())
          break;
        start = b + 1;
        while (start < s.size() &&
               (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80)
          ++start;
      }
    }
    pcre2_match_data_free(md);
    return out;
  }

private:
  static std::string message(int code) {
    PCRE2_UCHAR buf[256];
    if (pcre2_get_error_message(code, buf, sizeof buf) < 0)
      return fmt::format("error {}", code);
    return reinterpret_cast<const char *>(buf);
  }
  pcre2_code *re_ = nullptr;
};

/// GPT-2's pre-tokenizer regex, the one ByteLevel uses with use_regex.
const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// What a split does with the pieces its pattern matches (`tokenizers`'
/// SplitDelimiterBehavior).
enum class Behavior {
  Removed,
  Isolated,
  MergedWithPrevious,
  MergedWithNext,
  Contiguous
};

/// Splits `s` at `matches` (sorted, non-overlapping) as `tokenizers` does:
/// the matches and the stretches between them, flagged, then combined by
/// the behaviour; empty pieces are dropped.
void splitAt(const std::string &s,
             const std::vector<std::pair<size_t, size_t>> &matches,
             Behavior behavior, bool invert, std::vector<std::string> &out) {
  struct Part {
    size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev < b)
      parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size())
    parts.push_back({prev, s.size(), invert});

  std::vector<Part> merged;
  bool previousMatch = false;
  switch (behavior) {
  case Behavior::Removed:
    for (const Part &p : parts)
      if (!p.match)
        merged.push_back(p);
    break;
  case Behavior::Isolated:
    merged = parts;
    break;
  case Behavior::MergedWithPrevious:
    for (const Part &p : parts) {
      if (p.match && !previousMatch && !merged.empty())
        merged.back().end = p.end;
      else
        merged.push_back(p);
      previousMatch = p.match;
    }
    break;
  case Behavior::MergedWithNext:
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      if (it->match && !previousMatch && !merged.empty())
        merged.back().begin = it->begin;
      else
        merged.push_back(*it);
      previousMatch = it->match;
    }
    std::reverse(merged.begin(), merged.end());
    break;
  case Behavior::Contiguous:
    for (const Part &p : parts) {
      if (p.match == previousMatch && !merged.empty())
        merged.back().end = p.end;
      else
        merged.push_back(p);
      previousMatch = p.match;
    }
    break;
  }
  for (const Part &p : merged)
    if (p.end > p.begin)
      out.push_back(s.substr(p.begin, p.end - p.begin));
}

/// One step of the pre-tokenizer.
struct PreStep {
  enum Kind { Split, Digits, ByteLevel } kind = Split;
  /// Split with a Regex pattern; Digits (one numeric character); ByteLevel
  /// with use_regex.
  std::shared_ptr<Regex> regex;
  std::string literal; ///< Split with a String pattern
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool individualDigits = false;
  bool addPrefixSpace = false;

  /// The pieces of `piece` after this step, appended to `out`.
  void apply(const std::string &piece, std::vector<std::string> &out) const {
    std::vector<std::pair<size_t, size_t>> matches;
    switch (kind) {
    case Split:
      if (regex) {
        matches = regex->findAll(piece);
      } else if (!literal.empty()) {
        for (size_t at = piece.find(literal); at != std::string::npos;
             at = piece.find(literal, at + literal.size()))
          matches.emplace_back(at, at + literal.size());
      }
      splitAt(piece, matches, behavior, invert, out);
      return;
    case Digits:
      // Every numeric character (Unicode categories Nd, Nl and No, as
      // Rust's char::is_numeric in `tokenizers`) is a match of its own;
      // Contiguous joins runs.
      splitAt(piece, regex->findAll(piece),
              individualDigits ? Behavior::Isolated : Behavior::Contiguous,
              false, out);
      return;
    case ByteLevel: {
      std::string text = piece;
      if (addPrefixSpace && (text.empty() || text[0] != ' '))
        text.insert(text.begin(), ' ');
      if (!regex) {
        if (!text.empty())
          out.push_back(std::move(text));
        return;
      }
      splitAt(text, regex->findAll(text), Behavior::Isolated, false, out);
      return;
    }
    }
  }
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

} // namespace

struct Tokenizer::Impl {
  std::string name;
  int64_t vocabSize = 0;
  /// Byte string of each BPE token whose symbols are all byte-level ones.
  std::unordered_map<std::string, int32_t> vocab;
  /// id -> bytes; which ids exist; which are special.
  std::vector<std::string> idBytes;
  std::vector<uint8_t> idExists, idSpecial;
  /// (left id << 32 | right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  int32_t byteId[256];
  bool ignoreMerges = false;
  std::vector<PreStep> steps;
  std::vector<AddedToken> added;
  /// Added tokens by first byte, longest first.
  std::vector<std::vector<const AddedToken *>> addedByFirst;

  void bpe(const std::string &piece, std::vector<int32_t> &out) const;
  void encodeSegment(const std::string &text, std::vector<int32_t> &out) const;
};

void Tokenizer::Impl::bpe(const std::string &piece,
                          std::vector<int32_t> &out) const {
  if (ignoreMerges) {
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  sym.reserve(piece.size());
  for (unsigned char c : piece) {
    if (byteId[c] < 0)
      throw Error(fmt::format(
          "{}: byte 0x{:02X} has no token: model.vocab lacks its byte-level "
          "symbol '{}' (an unknown byte needs byte_fallback, which modrun "
          "does not support)",
          name, c, utf8(byteLevel().byteToCp[c])));
    sym.push_back(byteId[c]);
  }
  // The merges, lowest rank first and leftmost first among equal ranks, as
  // `tokenizers` does: symbols in a linked list, candidate pairs in a heap,
  // and a popped pair that a merge has changed since it was queued is
  // skipped. O(n log n) in the piece's length (a run of spaces is one piece).
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t merged;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int n = static_cast<int>(sym.size());
  std::vector<Symbol> list(n);
  for (int i = 0; i < n; ++i)
    list[i] = {sym[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  auto lookup = [&](int32_t a,
                    int32_t b) -> const std::pair<int32_t, int32_t> * {
    auto it =
        merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                    static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    int right = left < 0 ? -1 : list[left].next;
    if (right < 0)
      return;
    if (const auto *m = lookup(list[left].id, list[right].id))
      queue.push({m->first, left, m->second});
  };
  for (int i = 0; i + 1 < n; ++i)
    consider(i);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol &left = list[c.pos];
    if (!left.alive || left.next < 0)
      continue;
    const auto *m = lookup(left.id, list[left.next].id);
    if (!m || m->first != c.rank || m->second != c.merged)
      continue; // stale: one of the two symbols changed
    Symbol &right = list[left.next];
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0)
      list[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = list[i].next)
    out.push_back(list[i].id);
}

void Tokenizer::Impl::encodeSegment(const std::string &text,
                                    std::vector<int32_t> &out) const {
  std::vector<std::string> pieces{text}, next;
  for (const PreStep &step : steps) {
    next.clear();
    for (const std::string &p : pieces)
      step.apply(p, next);
    pieces.swap(next);
  }
  for (const std::string &p : pieces)
    bpe(p, out);
}

//===----------------------------------------------------------------------===//
// Reading tokenizer.json
//===----------------------------------------------------------------------===//

namespace {

/// Reads the JSON of a tokenizer.json, naming the file and the key (a
/// dotted path, "model.merges[3]") in every error.
class Reader {
public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string &key,
                         const std::string &what) const {
    throw Error(fmt::format("{}: {}: {}", where_, key, what));
  }
  [[noreturn]] void unsupported(const std::string &key,
                                const std::string &what) const {
    fail(key, what + " is not supported (modrun reads byte-level BPE "
                     "tokenizers: docs/runtime.md, \"Tokenizers\")");
  }
  const json &object(const json &parent, const std::string &key,
                     const std::string &path) const {
    if (!parent.contains(key))
      fail(path, "missing");
    const json &v = parent[key];
    if (!v.is_object())
      fail(path, fmt::format("must be an object, got {}", v.type_name()));
    return v;
  }
  std::string string(const json &v, const std::string &path) const {
    if (!v.is_string())
      fail(path, fmt::format("must be a string, got {}", v.type_name()));
    return v.get<std::string>();
  }
  bool boolean(const json &parent, const std::string &key,
               const std::string &path, bool fallback) const {
    if (!parent.contains(key) || parent[key].is_null())
      return fallback;
    if (!parent[key].is_boolean())
      fail(path, fmt::format("must be true or false, got {}",
                             parent[key].type_name()));
    return parent[key].get<bool>();
  }
  int32_t id(const json &v, const std::string &path) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= (int64_t(1) << 24))
      fail(path,
           fmt::format("must be a token id in [0, 2^24), got {}", v.dump()));
    return static_cast<int32_t>(v.get<int64_t>());
  }
  /// Refuses keys of `obj` not in `known`.
  void onlyKeys(const json &obj, const std::string &path,
                std::initializer_list<const char *> known) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool ok = false;
      for (const char *k : known)
        ok |= it.key() == k;
      if (!ok)
        unsupported(path.empty() ? it.key() : path + "." + it.key(), "the key");
    }
  }
  const std::string &where() const { return where_; }

private:
  std::string where_;
};

/// The type of a pre-tokenizer or decoder object.
std::string typeOf(const Reader &r, const json &v, const std::string &path) {
  if (!v.is_object())
    r.fail(path, fmt::format("must be an object, got {}", v.type_name()));
  if (!v.contains("type"))
    r.fail(path + ".type", "missing");
  return r.string(v["type"], path + ".type");
}

void readPreTokenizer(const Reader &r, const json &v, const std::string &path,
                      std::vector<PreStep> &steps) {
  std::string type = typeOf(r, v, path);
  if (type == "Sequence") {
    r.onlyKeys(v, path, {"type", "pretokenizers"});
    if (!v.contains("pretokenizers") || !v["pretokenizers"].is_array())
      r.fail(path + ".pretokenizers", "must be an array");
    const json &list = v["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i)
      readPreTokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", path, i),
                       steps);
    return;
  }
  PreStep step;
  if (type == "Split") {
    r.onlyKeys(v, path, {"type", "pattern", "behavior", "invert"});
    step.kind = PreStep::Split;
    const json &pattern = r.object(v, "pattern", path + ".pattern");
    if (pattern.size() == 1 && pattern.contains("Regex"))
      step.regex = std::make_shared<Regex>(
          r.string(pattern["Regex"], path + ".pattern.Regex"),
          fmt::format("{}: {}.pattern.Regex", r.where(), path));
    else if (pattern.size() == 1 && pattern.contains("String"))
      step.literal = r.string(pattern["String"], path + ".pattern.String");
    else
      r.fail(path + ".pattern", "must be {\"Regex\": ...} or {\"String\": "
                                "...}");
    if (!v.contains("behavior"))
      r.fail(path + ".behavior", "missing");
    std::string b = r.string(v["behavior"], path + ".behavior");
    if (b == "Removed")
      step.behavior = Behavior::Removed;
    else if (b == "Isolated")
      step.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious")
      step.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext")
      step.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous")
      step.behavior = Behavior::Contiguous;
    else
      r.unsupported(path + ".behavior", fmt::format("'{}'", b));
    step.invert = r.boolean(v, "invert", path + ".invert", false);
  } else if (type == "Digits") {
    r.onlyKeys(v, path, {"type", "individual_digits"});
    step.kind = PreStep::Digits;
    step.individualDigits =
        r.boolean(v, "individual_digits", path + ".individual_digits", false);
    step.regex = std::make_shared<Regex>(
        "\\p{N}", fmt::format("{}: {}", r.where(), path));
  } else if (type == "ByteLevel") {
    r.onlyKeys(v, path,
               {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    step.kind = PreStep::ByteLevel;
    step.addPrefixSpace =
        r.boolean(v, "add_prefix_space", path + ".add_prefix_space", true);
    if (r.boolean(v, "use_regex", path + ".use_regex", true))
      step.regex = std::make_shared<Regex>(
          kGpt2Pattern, fmt::format("{}: {}", r.where(), path));
  } else {
    r.unsupported(path + ".type", fmt::format("'{}'", type));
  }
  steps.push_back(std::move(step));
}

/// A merge as its two symbol strings ("a b" or ["a", "b"]).
std::pair<std::string, std::string> readMerge(const Reader &r, const json &m,
                                              const std::string &path) {
  if (m.is_string()) {
    std::string s = m.get<std::string>();
    size_t space = s.find(' ');
    if (space == std::string::npos ||
        s.find(' ', space + 1) != std::string::npos)
      r.fail(path, fmt::format("\"{}\" must be two symbols separated by one "
                               "space",
                               s));
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  r.fail(path,
         fmt::format("must be \"a b\" or [\"a\", \"b\"], got {}", m.dump()));
}

} // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;
Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::fromFile(const std::string &path) {
  return fromJson(readWholeFile(path, "tokenizer.json"), path);
}

Tokenizer Tokenizer::fromJson(const std::string &text,
                              const std::string &where) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &e) {
    throw Error(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  Reader r(where);
  if (!root.is_object())
    throw Error(fmt::format("{}: must be a JSON object (a Hugging Face "
                            "tokenizer.json), got {}",
                            where, root.type_name()));
  r.onlyKeys(root, "",
             {"version", "truncation", "padding", "added_tokens", "normalizer",
              "pre_tokenizer", "post_processor", "decoder", "model"});
  auto impl = std::make_unique<Impl>();
  impl->name = where;

  if (root.contains("truncation") && !root["truncation"].is_null())
    r.unsupported("truncation", "truncation");
  if (root.contains("normalizer") && !root["normalizer"].is_null())
    r.unsupported("normalizer",
                  fmt::format("a normalizer ('{}')",
                              typeOf(r, root["normalizer"], "normalizer")));
  // The post-processor only adds special tokens around an encoding (a BOS
  // of TemplateProcessing); modrun encodes without them.
  if (root.contains("post_processor") && !root["post_processor"].is_null()) {
    std::string type = typeOf(r, root["post_processor"], "post_processor");
    if (type != "ByteLevel" && type != "TemplateProcessing")
      r.unsupported("post_processor.type", fmt::format("'{}'", type));
  }
  if (!root.contains("decoder") || root["decoder"].is_null())
    r.fail("decoder", "missing: a byte-level BPE needs the ByteLevel decoder");
  {
    std::string type = typeOf(r, root["decoder"], "decoder");
    if (type != "ByteLevel")
      r.unsupported("decoder.type", fmt::format("'{}'", type));
  }
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null())
    r.fail("pre_tokenizer", "missing: a byte-level BPE needs the ByteLevel "
                            "pre-tokenizer");
  readPreTokenizer(r, root["pre_tokenizer"], "pre_tokenizer", impl->steps);
  for (size_t i = 0; i < impl->steps.size(); ++i)
    if ((impl->steps[i].kind == PreStep::ByteLevel) !=
        (i + 1 == impl->steps.size()))
      r.unsupported("pre_tokenizer",
                    "a pre-tokenizer that does not end with ByteLevel (or "
                    "has steps after it)");

  // The model.
  const json &model = r.object(root, "model", "model");
  r.onlyKeys(model, "model",
             {"type", "dropout", "unk_token", "continuing_subword_prefix",
              "end_of_word_suffix", "fuse_unk", "byte_fallback",
              "ignore_merges", "vocab", "merges"});
  if (!model.contains("type"))
    r.fail("model.type", "missing");
  std::string type = r.string(model["type"], "model.type");
  if (type != "BPE")
    r.unsupported("model.type", fmt::format("'{}'", type));
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0))
    r.unsupported("model.dropout", "BPE dropout");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty()))
      r.unsupported(fmt::format("model.{}", key), fmt::format("a {}", key));
  if (r.boolean(model, "byte_fallback", "model.byte_fallback", false))
    r.unsupported("model.byte_fallback", "byte_fallback true");
  impl->ignoreMerges =
      r.boolean(model, "ignore_merges", "model.ignore_merges", false);

  const json &vocab = r.object(model, "vocab", "model.vocab");
  std::unordered_map<std::string, int32_t> bySymbols;
  int64_t size = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    size = std::max<int64_t>(
        size, r.id(it.value(), fmt::format("model.vocab[\"{}\"]", it.key())) +
                  int64_t(1));
  if (root.contains("added_tokens") && !root["added_tokens"].is_array())
    r.fail("added_tokens", fmt::format("must be an array, got {}",
                                       root["added_tokens"].type_name()));
  const json noTokens = json::array();
  const json &added =
      root.contains("added_tokens") ? root["added_tokens"] : noTokens;
  for (size_t i = 0; i < added.size(); ++i) {
    std::string path = fmt::format("added_tokens[{}]", i);
    if (!added[i].is_object() || !added[i].contains("id"))
      r.fail(path, "must be an object with an id");
    size = std::max<int64_t>(size, r.id(added[i]["id"], path + ".id") + 1);
  }
  if (size == 0)
    r.fail("model.vocab", "is empty");
  impl->vocabSize = size;
  impl->idBytes.assign(size, std::string());
  impl->idExists.assign(size, 0);
  impl->idSpecial.assign(size, 0);
  std::fill(std::begin(impl->byteId), std::end(impl->byteId), -1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    if (impl->idExists[id])
      r.fail(fmt::format("model.vocab[\"{}\"]", it.key()),
             fmt::format("id {} is given to two tokens", id));
    impl->idExists[id] = 1;
    bySymbols.emplace(it.key(), id);
    if (auto bytes = symbolsToBytes(it.key())) {
      impl->idBytes[id] = *bytes;
      impl->vocab.emplace(*bytes, id);
      if (bytes->size() == 1)
        impl->byteId[static_cast<unsigned char>((*bytes)[0])] = id;
    } else {
      impl->idBytes[id] = it.key(); // not byte-level: its text, as decoders do
    }
  }

  if (!model.contains("merges"))
    r.fail("model.merges", "missing");
  const json &merges = model["merges"];
  if (!merges.is_array())
    r.fail("model.merges",
           fmt::format("must be an array, got {}", merges.type_name()));
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string path = fmt::format("model.merges[{}]", i);
    auto [a, b] = readMerge(r, merges[i], path);
    auto find = [&](const std::string &s) {
      auto it = bySymbols.find(s);
      if (it == bySymbols.end())
        r.fail(path, fmt::format("'{}' is not in model.vocab", s));
      return it->second;
    };
    int32_t left = find(a), right = find(b), merged = find(a + b);
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                   static_cast<uint32_t>(right);
    impl->merges[key] = {static_cast<int32_t>(i), merged};
  }

  for (size_t i = 0; i < added.size(); ++i) {
    std::string path = fmt::format("added_tokens[{}]", i);
    const json &t = added[i];
    r.onlyKeys(t, path,
               {"id", "content", "single_word", "lstrip", "rstrip",
                "normalized", "special"});
    for (const char *key : {"single_word", "lstrip", "rstrip"})
      if (r.boolean(t, key, path + "." + key, false))
        r.unsupported(path + "." + key, fmt::format("{} true", key));
    if (!t.contains("content"))
      r.fail(path + ".content", "missing");
    AddedToken tok{r.string(t["content"], path + ".content"),
                   t["id"].get<int32_t>(),
                   r.boolean(t, "special", path + ".special", false)};
    if (tok.content.empty())
      r.fail(path + ".content", "is empty");
    impl->idExists[tok.id] = 1;
    impl->idSpecial[tok.id] = tok.special;
    impl->idBytes[tok.id] = tok.content;
    impl->added.push_back(std::move(tok));
  }
  impl->addedByFirst.assign(256, {});
  for (const AddedToken &t : impl->added)
    impl->addedByFirst[static_cast<unsigned char>(t.content[0])].push_back(&t);
  for (auto &list : impl->addedByFirst)
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken *a, const AddedToken *b) {
                       return a->content.size() > b->content.size();
                     });
  return Tokenizer(std::move(impl));
}

//===----------------------------------------------------------------------===//
// Encoding and decoding
//===----------------------------------------------------------------------===//

const std::string &Tokenizer::name() const {
  static const std::string bytes = "bytes";
  return impl_ ? impl_->name : bytes;
}

int64_t Tokenizer::vocabSize() const { return impl_ ? impl_->vocabSize : 256; }

std::vector<int32_t> Tokenizer::encode(const std::string &text) const {
  std::vector<int32_t> out;
  if (!impl_) {
    out.reserve(text.size());
    for (unsigned char c : text)
      out.push_back(c);
    return out;
  }
  // Added tokens first: at each position the longest one that starts
  // there; the stretches between them go through the pre-tokenizer.
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken *hit = nullptr;
    for (const AddedToken *t :
         impl_->addedByFirst[static_cast<unsigned char>(text[i])])
      if (text.compare(i, t->content.size(), t->content) == 0) {
        hit = t;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start)
      impl_->encodeSegment(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size())
    impl_->encodeSegment(text.substr(start), out);
  return out;
}

std::string Tokenizer::tokenBytes(int32_t id) const {
  if (!impl_)
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id))
                               : std::string();
  if (id < 0 || id >= impl_->vocabSize)
    return std::string();
  return impl_->idBytes[id];
}

bool Tokenizer::isSpecial(int32_t id) const {
  return impl_ && id >= 0 && id < impl_->vocabSize && impl_->idSpecial[id];
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids,
                              bool skipSpecial) const {
  std::string out;
  for (int32_t id : ids)
    if (!(skipSpecial && isSpecial(id)))
      out += tokenBytes(id);
  return out;
}

void Tokenizer::checkFits(int64_t modelVocab, const std::string &where) const {
  if (impl_ && vocabSize() > modelVocab)
    throw Error(fmt::format("{}: the tokenizer {} has {} tokens (ids up to "
                            "{}), more than the model's vocab_size {}",
                            where, name(), vocabSize(), vocabSize() - 1,
                            modelVocab));
}

//===----------------------------------------------------------------------===//
// Utf8Stream
//===----------------------------------------------------------------------===//

std::string Utf8Stream::push(const std::string &bytes) {
  std::string data = held_ + bytes;
  held_.clear();
  // Walk back over continuation bytes (at most 3) to the lead byte of the
  // last sequence; hold it back if it announces more bytes than follow.
  size_t n = data.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = data[n - back];
    if ((c & 0xc0) == 0x80)
      continue;
    size_t need = c >= 0xc2 && c <= 0xdf   ? 2
                  : c >= 0xe0 && c <= 0xef ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4
                                           : 1;
    if (need > back) {
      held_ = data.substr(n - back);
      data.resize(n - back);
    }
    break;
  }
  return data;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(held_);
  return out;
}
