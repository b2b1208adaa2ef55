//===- Tensor.cpp - Host tensors and safetensors files -------------------===//
//
// The safetensors reader trusts nothing in the file: every size and offset is
// checked against the real file length before any allocation, so a corrupt or
// hostile file yields a modrt::Error, never a crash or a huge allocation.
//
//===----------------------------------------------------------------------===//
#include "modrt/Tensor.h"
#include "modrt/Error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace modrt;

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "modrt reads and writes little-endian safetensors data in place"
#endif

/// The safetensors reference implementation refuses headers above 100 MB;
/// anything larger is a corrupt length field, not a real header.
static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const char *modrt::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::I32:
    return "I32";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  }
  return "?";
}

size_t modrt::dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  }
  return 0;
}

static float floatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float modrt::bf16ToFloat(uint16_t bits) {
  return floatFromBits(static_cast<uint32_t>(bits) << 16);
}

float modrt::f16ToFloat(uint16_t bits) {
  // binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) // infinity or NaN: all-ones exponent in binary32 too
    return floatFromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0)
      return floatFromBits(sign); // +-0
    // Subnormal: mantissa * 2^-24. Shift the leading one up to bit 10 to
    // make it a normal binary32 number with the exponent lowered to match.
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    uint32_t e32 = static_cast<uint32_t>(127 - 15 + 1 - shift);
    return floatFromBits(sign | (e32 << 23) | (mantissa << 13));
  }
  return floatFromBits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

std::string modrt::shapeString(const std::vector<int64_t> &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

/// Element count of `shape`, or -1 if a dimension is negative or the product
/// overflows int64.
static int64_t checkedNumel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  }
  return n;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  int64_t n = checkedNumel(shape);
  uint64_t bytes;
  if (n < 0 || __builtin_mul_overflow(static_cast<uint64_t>(n),
                                      dtypeSize(dtype), &bytes))
    throw Error(fmt::format("invalid tensor shape {}: negative or too large",
                            shapeString(shape)));
  Tensor t;
  t.dtype = dtype;
  t.fileDType = dtype;
  t.shape = std::move(shape);
  t.data.assign(bytes, std::byte{0});
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static void requireDType(const Tensor &t, DType want) {
  if (t.dtype != want)
    throw Error(fmt::format("tensor of shape {} is {}, not {}",
                            shapeString(t.shape), dtypeName(t.dtype),
                            dtypeName(want)));
}

float *Tensor::f32() {
  requireDType(*this, DType::F32);
  return reinterpret_cast<float *>(data.data());
}
const float *Tensor::f32() const {
  requireDType(*this, DType::F32);
  return reinterpret_cast<const float *>(data.data());
}
int32_t *Tensor::i32() {
  requireDType(*this, DType::I32);
  return reinterpret_cast<int32_t *>(data.data());
}
const int32_t *Tensor::i32() const {
  requireDType(*this, DType::I32);
  return reinterpret_cast<const int32_t *>(data.data());
}

//===----------------------------------------------------------------------===//
// TensorMap
//===----------------------------------------------------------------------===//

Tensor &TensorMap::insert(const std::string &name, Tensor tensor) {
  if (name.empty())
    throw Error("tensor name must not be empty");
  if (name == "__metadata__")
    throw Error("'__metadata__' is reserved and cannot name a tensor");
  if (index.count(name))
    throw Error(fmt::format("duplicate tensor '{}'", name));
  index.emplace(name, entries.size());
  entries.emplace_back(name, std::move(tensor));
  return entries.back().second;
}

bool TensorMap::contains(const std::string &name) const {
  return index.count(name) != 0;
}

const Tensor *TensorMap::find(const std::string &name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

Tensor *TensorMap::find(const std::string &name) {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

const Tensor &TensorMap::get(const std::string &name) const {
  if (const Tensor *t = find(name))
    return *t;
  throw Error(fmt::format("no tensor named '{}'", name));
}

Tensor &TensorMap::get(const std::string &name) {
  if (Tensor *t = find(name))
    return *t;
  throw Error(fmt::format("no tensor named '{}'", name));
}

namespace {
/// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Reads exactly `size` bytes at `offset`; throws on a short read.
void preadAll(int fd, void *buf, size_t size, uint64_t offset,
              const std::string &path) {
  auto *p = static_cast<char *>(buf);
  while (size > 0) {
    ssize_t got = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      throw Error(fmt::format("{}: read failed at byte {}: {}", path, offset,
                              got < 0 ? std::strerror(errno)
                                      : "unexpected end of file"));
    p += got;
    size -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

/// One header entry after validation.
struct Slot {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};
} // namespace

TensorMap TensorMap::load(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{}: not a regular file", path));
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);

  if (fileSize < 8)
    throw Error(fmt::format("{}: not a safetensors file: {} bytes, shorter "
                            "than the 8-byte header length",
                            path, fileSize));
  unsigned char lenBytes[8];
  preadAll(fd, lenBytes, 8, 0, path);
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | lenBytes[i];
  if (headerLen > fileSize - 8)
    throw Error(fmt::format("{}: header length {} runs past the end of the "
                            "file ({} bytes); the file is truncated or not "
                            "safetensors",
                            path, headerLen, fileSize));
  if (headerLen > kMaxHeaderBytes)
    throw Error(fmt::format("{}: header length {} is absurd (limit {})", path,
                            headerLen, kMaxHeaderBytes));
  if (headerLen < 2)
    throw Error(fmt::format("{}: header length {} is too small for a JSON "
                            "object",
                            path, headerLen));

  std::string headerText(headerLen, '\0');
  preadAll(fd, headerText.data(), headerLen, 8, path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(headerText);
  } catch (const nlohmann::json::exception &e) {
    throw Error(
        fmt::format("{}: header is not valid JSON: {}", path, e.what()));
  }
  if (!header.is_object())
    throw Error(fmt::format("{}: header must be a JSON object, got {}", path,
                            header.type_name()));

  const uint64_t dataStart = 8 + headerLen;
  const uint64_t dataSize = fileSize - dataStart;
  TensorMap result;
  std::vector<Slot> slots;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object())
        throw Error(fmt::format("{}: '__metadata__' must be an object of "
                                "strings, got {}",
                                path, e.type_name()));
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string())
          throw Error(fmt::format("{}: '__metadata__' key '{}' must be a "
                                  "string, got {}",
                                  path, m.key(), m.value().type_name()));
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string &what) {
      return Error(fmt::format("{}: tensor '{}': {}", path, name, what));
    };
    if (name.empty())
      throw Error(
          fmt::format("{}: header has a tensor with an empty name", path));
    if (!e.is_object())
      throw bad(fmt::format("entry must be an object, got {}", e.type_name()));
    for (const char *key : {"dtype", "shape", "data_offsets"})
      if (!e.contains(key))
        throw bad(fmt::format("entry is missing '{}'", key));

    Slot s;
    s.name = name;
    const nlohmann::json &dt = e["dtype"];
    if (!dt.is_string())
      throw bad(
          fmt::format("'dtype' must be a string, got {}", dt.type_name()));
    std::string dts = dt.get<std::string>();
    if (dts == "F32")
      s.dtype = DType::F32;
    else if (dts == "I32")
      s.dtype = DType::I32;
    else if (dts == "BF16")
      s.dtype = DType::BF16;
    else if (dts == "F16")
      s.dtype = DType::F16;
    else
      throw bad(fmt::format("dtype '{}' is not supported (modrt reads F32, "
                            "I32, BF16 and F16)",
                            dts));

    const nlohmann::json &sh = e["shape"];
    if (!sh.is_array())
      throw bad(
          fmt::format("'shape' must be an array, got {}", sh.type_name()));
    for (const nlohmann::json &d : sh) {
      if (!d.is_number_integer())
        throw bad(
            fmt::format("'shape' {} has a non-integer dimension", sh.dump()));
      if (d.is_number_unsigned() &&
          d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw bad(
            fmt::format("'shape' {} has a dimension too large", sh.dump()));
      int64_t v = d.get<int64_t>();
      if (v < 0)
        throw bad(
            fmt::format("'shape' {} has a negative dimension", sh.dump()));
      s.shape.push_back(v);
    }

    const nlohmann::json &off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw bad(fmt::format("'data_offsets' must be two non-negative "
                            "integers [begin, end], got {}",
                            off.dump()));
    s.begin = off[0].get<uint64_t>();
    s.end = off[1].get<uint64_t>();
    if (s.end < s.begin)
      throw bad(fmt::format("data_offsets [{}, {}]: end is before begin",
                            s.begin, s.end));
    if (s.end > dataSize)
      throw bad(fmt::format("data_offsets [{}, {}] run past the end of the "
                            "data ({} bytes); the file is truncated",
                            s.begin, s.end, dataSize));
    int64_t n = checkedNumel(s.shape);
    uint64_t want;
    if (n < 0 || __builtin_mul_overflow(static_cast<uint64_t>(n),
                                        dtypeSize(s.dtype), &want))
      throw bad(fmt::format("shape {} is too large", shapeString(s.shape)));
    if (s.end - s.begin != want)
      throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but {} "
                            "{} needs {} bytes",
                            s.begin, s.end, s.end - s.begin, dts,
                            shapeString(s.shape), want));
    slots.push_back(std::move(s));
  }

  // The data section must be covered exactly: no overlap, no hole, nothing
  // after the last tensor (the rules of the reference implementation).
  std::stable_sort(
      slots.begin(), slots.end(), [](const Slot &a, const Slot &b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
      });
  uint64_t cursor = 0;
  const Slot *prev = nullptr;
  for (const Slot &s : slots) {
    if (s.begin < cursor)
      throw Error(fmt::format("{}: tensor '{}' (bytes [{}, {})) overlaps "
                              "tensor '{}' (bytes [{}, {}))",
                              path, s.name, s.begin, s.end, prev->name,
                              prev->begin, prev->end));
    if (s.begin > cursor)
      throw Error(fmt::format("{}: tensor '{}' starts at byte {} but the "
                              "previous data ends at byte {}: a hole of {} "
                              "unused bytes",
                              path, s.name, s.begin, cursor, s.begin - cursor));
    cursor = s.end;
    prev = &s;
  }
  if (cursor != dataSize)
    throw Error(fmt::format(
        "{}: extra data past the end of the last tensor"
        "{}: {} bytes of data, tensors cover {}",
        path, prev ? fmt::format(" ('{}')", prev->name) : std::string(),
        dataSize, cursor));

  for (Slot &s : slots) {
    Tensor t;
    t.dtype = s.dtype;
    t.fileDType = s.dtype;
    t.shape = std::move(s.shape);
    t.data.resize(s.end - s.begin);
    if (!t.data.empty())
      preadAll(fd, t.data.data(), t.data.size(), dataStart + s.begin, path);
    if (s.dtype == DType::BF16 || s.dtype == DType::F16) {
      // Widen to F32 in place of the 2-byte data (docs/model-format.md
      // section 6): every BF16 and F16 value is exactly a float.
      size_t n = t.data.size() / 2;
      AlignedBytes wide(n * 4);
      const std::byte *src = t.data.data();
      float *dst = reinterpret_cast<float *>(wide.data());
      bool bf16 = s.dtype == DType::BF16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = bf16 ? bf16ToFloat(bits) : f16ToFloat(bits);
      }
      t.data = std::move(wide);
      t.dtype = DType::F32;
    }
    result.insert(s.name, std::move(t));
  }
  return result;
}

namespace {
void writeAll(int fd, const void *buf, size_t size, const std::string &path) {
  const char *p = static_cast<const char *>(buf);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw Error(
          fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    p += n;
    size -= static_cast<size_t>(n);
  }
}
} // namespace

void TensorMap::save(const std::string &path) const {
  // Header in insertion order; data laid out back to back in that order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto &[k, v] : metadata)
      meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto &[name, t] : entries) {
    int64_t n = checkedNumel(t.shape);
    if (n < 0 || static_cast<uint64_t>(n) * dtypeSize(t.dtype) != t.data.size())
      throw Error(fmt::format("{}: tensor '{}' has shape {} but {} bytes of "
                              "{} data",
                              path, name, shapeString(t.shape), t.data.size(),
                              dtypeName(t.dtype)));
    header[name] = {{"dtype", dtypeName(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned in the file.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  unsigned char lenBytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    lenBytes[i] = static_cast<unsigned char>(len >> (8 * i));

  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::string dir = path.find('/') == std::string::npos
                        ? std::string(".")
                        : path.substr(0, path.rfind('/') + 1);
  // The data go into an unnamed file (O_TMPFILE) that gets the temporary
  // name only once complete, just before the rename: a crash or kill -9
  // while writing leaves nothing behind. Where the file system lacks
  // O_TMPFILE, the temporary is named from the start (modrun train removes
  // the ones of dead processes).
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  const bool unnamed = fd >= 0;
  if (!unnamed)
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(fmt::format("{}: cannot create '{}': {}", path, tmp,
                            std::strerror(errno)));
  bool named = !unnamed;
  try {
    writeAll(fd, lenBytes, 8, tmp);
    writeAll(fd, text.data(), text.size(), tmp);
    for (const auto &entry : entries)
      if (!entry.second.data.empty())
        writeAll(fd, entry.second.data.data(), entry.second.data.size(), tmp);
    if (::fsync(fd) != 0)
      throw Error(
          fmt::format("{}: fsync failed: {}", tmp, std::strerror(errno)));
    if (unnamed) {
      ::unlink(tmp.c_str()); // a leftover of an earlier process with our pid
      std::string self = fmt::format("/proc/self/fd/{}", fd);
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(),
                   AT_SYMLINK_FOLLOW) != 0)
        throw Error(fmt::format("{}: cannot name the written file '{}': {}",
                                path, tmp, std::strerror(errno)));
      named = true;
    }
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0)
      throw Error(
          fmt::format("{}: close failed: {}", tmp, std::strerror(errno)));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(fmt::format("{}: cannot rename '{}' into place: {}", path,
                              tmp, std::strerror(errno)));
  } catch (...) {
    if (fd >= 0)
      ::close(fd);
    if (named)
      ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; failure here loses nothing already
  // written, so it is best effort.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}
