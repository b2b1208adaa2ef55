//===- Tensor.h - Host tensors and safetensors files ------------*- C++ -*-===//
//
// A Tensor is a dense row-major host buffer with a dtype and a shape; a
// TensorMap is an insertion-ordered set of named tensors that reads and writes
// the safetensors format (docs/model-format.md section 6): an 8-byte
// little-endian header length N, N bytes of JSON header, then the raw
// little-endian data.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_TENSOR_H
#define MODRT_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace modrt {

/// Element types of safetensors files the runtime reads. Tensors in memory
/// are F32 or I32: TensorMap::load widens BF16 and F16 data to F32 exactly
/// (docs/model-format.md section 6), and Tensor::fileDType remembers what the
/// file held. Other safetensors dtypes are refused.
enum class DType { F32, I32, BF16, F16 };

/// The safetensors name of `dtype` ("F32", "I32", "BF16", "F16").
const char *dtypeName(DType dtype);
/// Bytes per element of `dtype`.
size_t dtypeSize(DType dtype);

/// The value of a bfloat16 (the high 16 bits of an IEEE binary32) as a
/// float: exact for every input, NaN payloads included.
float bf16ToFloat(uint16_t bits);
/// The value of an IEEE binary16 as a float: exact for every input
/// (subnormals become normal floats; infinities stay infinite; a NaN keeps
/// its sign and payload, shifted into the float's mantissa).
float f16ToFloat(uint16_t bits);

/// Allocator returning storage aligned to `Align` bytes, so tensor data can be
/// handed to vectorised package kernels directly.
template <typename T, size_t Align> struct AlignedAllocator {
  using value_type = T;
  template <typename U> struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  AlignedAllocator() noexcept = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Align> &) noexcept {}
  T *allocate(size_t n) {
    return static_cast<T *>(
        ::operator new(n * sizeof(T), std::align_val_t(Align)));
  }
  void deallocate(T *p, size_t) noexcept {
    ::operator delete(p, std::align_val_t(Align));
  }
  template <typename U>
  bool operator==(const AlignedAllocator<U, Align> &) const {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U, Align> &) const {
    return false;
  }
};

/// Byte storage aligned to 64 bytes (a cache line, and enough for AVX-512).
using AlignedBytes = std::vector<std::byte, AlignedAllocator<std::byte, 64>>;

/// A dense, row-major host tensor.
struct Tensor {
  DType dtype = DType::F32; ///< F32 or I32 (what data holds)
  /// The dtype in the file the tensor was loaded from: BF16 or F16 for data
  /// widened to F32 on load, else dtype. save() writes dtype.
  DType fileDType = DType::F32;
  std::vector<int64_t> shape;
  AlignedBytes data; ///< numel() * dtypeSize(dtype) bytes

  /// A zero-filled tensor. Throws Error on a negative or overflowing shape.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);

  /// Number of elements (1 for a scalar of shape []).
  int64_t numel() const;
  /// Size of the data in bytes.
  size_t byteSize() const { return data.size(); }

  /// The data as floats; throws Error unless dtype is F32.
  float *f32();
  const float *f32() const;
  /// The data as 32-bit integers; throws Error unless dtype is I32.
  int32_t *i32();
  const int32_t *i32() const;
};

/// Formats a shape as "[2, 3]" for messages.
std::string shapeString(const std::vector<int64_t> &shape);

/// Named tensors in insertion order, loadable from and savable to safetensors.
class TensorMap {
public:
  using Entry = std::pair<std::string, Tensor>;

  /// Reads a safetensors file, validating everything (sizes, offsets, dtypes,
  /// overlaps, trailing data). F32 and I32 are read as stored; BF16 and F16
  /// are widened to F32 exactly (fileDType says which it was). Tensors come
  /// in data-offset order. Throws Error naming the file and, where it
  /// applies, the tensor.
  static TensorMap load(const std::string &path);

  /// Writes a safetensors file atomically: the data goes to
  /// `path.tmp.<pid>`, is fsync'd, then renamed over `path`, so a half-written
  /// file never exists under the final name. Throws Error on I/O failure and
  /// removes the temporary file.
  void save(const std::string &path) const;

  /// Adds a tensor; throws Error if `name` is already present or empty.
  Tensor &insert(const std::string &name, Tensor tensor);
  /// Whether a tensor called `name` exists.
  bool contains(const std::string &name) const;
  /// The tensor called `name`, or nullptr.
  const Tensor *find(const std::string &name) const;
  Tensor *find(const std::string &name);
  /// The tensor called `name`; throws Error naming it when it is absent.
  const Tensor &get(const std::string &name) const;
  Tensor &get(const std::string &name);

  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries.end(); }
  std::vector<Entry>::iterator begin() { return entries.begin(); }
  std::vector<Entry>::iterator end() { return entries.end(); }

  /// Free-form string metadata (the safetensors "__metadata__" object).
  std::map<std::string, std::string> metadata;

private:
  std::vector<Entry> entries;
  std::unordered_map<std::string, size_t> index;
};

} // namespace modrt

#endif // MODRT_TENSOR_H
