//===- SafetensorsTest.cpp - TensorMap load/save and validation ----------===//
//
// Round trips, and one test per corruption the reader must refuse with an
// error naming the file and the tensor.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "modrt/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

using namespace modrt;
using namespace modrt_test;

namespace {

/// A safetensors file from a header text and raw data; `lengthOverride`
/// replaces the header length field when given.
std::string rawFile(const std::string &header, const std::string &data,
                    int64_t lengthOverride = -1) {
  uint64_t len = lengthOverride >= 0 ? static_cast<uint64_t>(lengthOverride)
                                     : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

Tensor randomF32(std::vector<int64_t> shape, std::mt19937 &gen) {
  Tensor t = Tensor::zeros(DType::F32, std::move(shape));
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = dist(gen);
  return t;
}

Tensor randomI32(std::vector<int64_t> shape, std::mt19937 &gen) {
  Tensor t = Tensor::zeros(DType::I32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.i32()[i] = static_cast<int32_t>(gen());
  return t;
}

class SafetensorsTest : public ::testing::Test {
protected:
  TempDir tmp;
  std::string file = tmp.path("t.safetensors");

  /// Writes `bytes` to `file` and expects load to fail naming `pieces`.
  ::testing::AssertionResult loadFails(const std::string &bytes,
                                       std::vector<std::string> pieces) {
    writeFile(file, bytes);
    pieces.push_back(file);
    return throwsError([&] { TensorMap::load(file); }, pieces);
  }
};

} // namespace

TEST_F(SafetensorsTest, RoundTripRandomData) {
  std::mt19937 gen(1234);
  TensorMap m;
  m.insert("zeta", randomF32({3, 5, 7}, gen));
  m.insert("alpha", randomI32({11}, gen));
  m.insert("scalar", randomF32({}, gen));
  m.insert("empty", Tensor::zeros(DType::F32, {0, 4}));
  m.insert("mid", randomF32({2, 1}, gen));
  m.metadata["format"] = "pt";
  m.metadata["note"] = "round trip";
  m.save(file);

  TensorMap back = TensorMap::load(file);
  ASSERT_EQ(back.size(), m.size());
  // Insertion order survives (it is the data order in the file).
  auto it = back.begin();
  for (const auto &[name, t] : m) {
    EXPECT_EQ(it->first, name);
    EXPECT_EQ(it->second.dtype, t.dtype) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    ASSERT_EQ(it->second.data.size(), t.data.size()) << name;
    // Compared as containers: memcmp on an empty tensor's null data is UB.
    EXPECT_TRUE(it->second.data == t.data) << name;
    ++it;
  }
  EXPECT_EQ(back.metadata, m.metadata);
  EXPECT_EQ(back.get("scalar").numel(), 1);
  EXPECT_EQ(back.get("empty").numel(), 0);
}

TEST_F(SafetensorsTest, HeaderIsPaddedToEightBytes) {
  std::mt19937 gen(7);
  for (int extra = 0; extra < 8; ++extra) {
    TensorMap m;
    m.insert(std::string(1 + extra, 'x'), randomF32({3}, gen));
    m.save(file);
    std::string bytes = readFile(file);
    uint64_t len = 0;
    std::memcpy(&len, bytes.data(), 8);
    EXPECT_EQ((8 + len) % 8, 0u) << "name length " << 1 + extra;
    EXPECT_EQ(bytes.size(), 8 + len + 12);
    EXPECT_EQ(TensorMap::load(file).get(std::string(1 + extra, 'x')).shape,
              std::vector<int64_t>{3});
  }
}

TEST_F(SafetensorsTest, LoadsFilesWrittenByOthers) {
  // Unpadded header, keys out of data order (as Python writers produce).
  std::string data(8 + 4, '\0');
  float f[2] = {1.5f, -2.0f};
  int32_t i = 42;
  std::memcpy(&data[4], f, 8);
  std::memcpy(&data[0], &i, 4);
  std::string header =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})";
  writeFile(file, rawFile(header, data));
  TensorMap m = TensorMap::load(file);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.begin()->first, "a"); // data-offset order
  EXPECT_EQ(m.get("a").i32()[0], 42);
  EXPECT_EQ(m.get("b").f32()[0], 1.5f);
  EXPECT_EQ(m.get("b").f32()[1], -2.0f);
}

TEST_F(SafetensorsTest, MissingFile) {
  EXPECT_TRUE(throwsError([&] { TensorMap::load(tmp.path("nope")); },
                          {tmp.path("nope"), "cannot open"}));
}

TEST_F(SafetensorsTest, ShorterThanEightBytes) {
  EXPECT_TRUE(loadFails("abc", {"shorter than the 8-byte"}));
  EXPECT_TRUE(loadFails("", {"0 bytes"}));
}

TEST_F(SafetensorsTest, TruncatedFile) {
  std::mt19937 gen(3);
  TensorMap m;
  m.insert("first", randomF32({4}, gen));
  m.insert("last", randomF32({16}, gen));
  m.save(file);
  std::string bytes = readFile(file);
  // Cut inside the data of "last": that tensor runs past the end.
  EXPECT_TRUE(loadFails(bytes.substr(0, bytes.size() - 10),
                        {"'last'", "past the end of the data"}));
  // Cut inside the header: the length field runs past the file.
  EXPECT_TRUE(loadFails(bytes.substr(0, 20), {"past the end of the file"}));
}

TEST_F(SafetensorsTest, CorruptHeaderLength) {
  std::string header =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string data(4, '\0');
  // Flipped high byte: an absurd length far past the end of the file.
  EXPECT_TRUE(loadFails(rawFile(header, data, int64_t(1) << 56),
                        {"header length", "past the end of the file"}));
  // Length one short: the JSON is cut.
  EXPECT_TRUE(
      loadFails(rawFile(header, data, header.size() - 1), {"not valid JSON"}));
}

TEST_F(SafetensorsTest, BadJson) {
  EXPECT_TRUE(loadFails(rawFile("{\"w\": [1, 2", ""), {"not valid JSON"}));
  EXPECT_TRUE(loadFails(rawFile("[1, 2, 3]", ""), {"must be a JSON object"}));
}

TEST_F(SafetensorsTest, MissingFields) {
  for (const char *field : {"dtype", "shape", "data_offsets"}) {
    nlohmann::json entry = {
        {"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}};
    entry.erase(field);
    nlohmann::json h = {{"weight.x", entry}};
    EXPECT_TRUE(loadFails(rawFile(h.dump(), std::string(4, '\0')),
                          {"'weight.x'", "missing", field}));
  }
  EXPECT_TRUE(loadFails(rawFile(R"({"w": 3})", ""), {"'w'", "object"}));
}

TEST_F(SafetensorsTest, WrongDtype) {
  std::string h =
      R"({"emb":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(16, '\0')),
                        {"'emb'", "F64", "F32, I32, BF16 and F16"}));
  h = R"({"emb":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(8, '\0')), {"'emb'", "dtype"}));
}

TEST_F(SafetensorsTest, NegativeOrBadDims) {
  std::string h =
      R"({"q":{"dtype":"F32","shape":[-1, 2],"data_offsets":[0,0]}})";
  EXPECT_TRUE(loadFails(rawFile(h, ""), {"'q'", "negative dimension"}));
  h = R"({"q":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})";
  EXPECT_TRUE(loadFails(rawFile(h, ""), {"'q'", "non-integer"}));
  // Overflowing element count must not allocate.
  h = R"({"q":{"dtype":"F32","shape":[4294967296, 4294967296],"data_offsets":[0,0]}})";
  EXPECT_TRUE(loadFails(rawFile(h, ""), {"'q'", "too large"}));
}

TEST_F(SafetensorsTest, OffsetsOutOfBounds) {
  std::string h = R"({"k":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(8, '\0')),
                        {"'k'", "[0, 16]", "past the end of the data"}));
  h = R"({"k":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(8, '\0')),
                        {"'k'", "end is before begin"}));
  h = R"({"k":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})";
  EXPECT_TRUE(
      loadFails(rawFile(h, std::string(8, '\0')), {"'k'", "data_offsets"}));
  h = R"({"k":{"dtype":"F32","shape":[1],"data_offsets":[0]}})";
  EXPECT_TRUE(
      loadFails(rawFile(h, std::string(4, '\0')), {"'k'", "data_offsets"}));
}

TEST_F(SafetensorsTest, SizeMismatch) {
  std::string h = R"({"v":{"dtype":"I32","shape":[3],"data_offsets":[0,8]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(8, '\0')),
                        {"'v'", "hold 8 bytes", "needs 12 bytes"}));
}

TEST_F(SafetensorsTest, TrailingBytes) {
  std::string h = R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(12, '\0')),
                        {"extra data past the end", "'v'"}));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_TRUE(
      loadFails(rawFile(h, std::string(12, '\0')), {"'a'", "'b'", "overlaps"}));
}

TEST_F(SafetensorsTest, HoleBetweenTensors) {
  std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(12, '\0')), {"'b'", "hole"}));
}

TEST_F(SafetensorsTest, BadMetadata) {
  std::string h = R"({"__metadata__":{"epoch":3}})";
  EXPECT_TRUE(loadFails(rawFile(h, ""), {"__metadata__", "epoch", "string"}));
}

TEST_F(SafetensorsTest, AtomicSaveLeavesNoTempFile) {
  std::mt19937 gen(5);
  TensorMap m;
  m.insert("w", randomF32({64, 64}, gen));
  m.save(file);
  m.save(file); // overwrite in place
  EXPECT_EQ(tmp.list(), std::vector<std::string>{"t.safetensors"});
  EXPECT_EQ(TensorMap::load(file).get("w").shape,
            (std::vector<int64_t>{64, 64}));
}

TEST_F(SafetensorsTest, FailedSaveCleansUpAndKeepsOldFile) {
  std::mt19937 gen(6);
  TensorMap m;
  m.insert("w", randomF32({8}, gen));
  // The final name is a non-empty directory: the rename must fail.
  std::filesystem::create_directory(tmp.path("out.safetensors"));
  writeFile(tmp.path("out.safetensors/keep"), "x");
  EXPECT_TRUE(throwsError([&] { m.save(tmp.path("out.safetensors")); },
                          {"out.safetensors"}));
  EXPECT_EQ(tmp.list(), std::vector<std::string>{"out.safetensors"});
  // A missing directory: the temp file cannot even be created.
  EXPECT_TRUE(throwsError([&] { m.save(tmp.path("no/such/dir.st")); },
                          {"cannot create"}));
}

TEST_F(SafetensorsTest, SaveRejectsInconsistentTensor) {
  TensorMap m;
  Tensor t = Tensor::zeros(DType::F32, {4});
  t.shape = {5}; // data no longer matches
  m.insert("bad", std::move(t));
  EXPECT_TRUE(throwsError([&] { m.save(file); }, {"'bad'", "[5]"}));
  EXPECT_TRUE(tmp.list().empty());
}

TEST(TensorTest, DtypeAccessorsAreChecked) {
  Tensor f = Tensor::zeros(DType::F32, {2});
  Tensor i = Tensor::zeros(DType::I32, {2});
  EXPECT_NO_THROW(f.f32());
  EXPECT_NO_THROW(i.i32());
  EXPECT_TRUE(throwsError([&] { f.i32(); }, {"F32", "not I32"}));
  EXPECT_TRUE(throwsError([&] { i.f32(); }, {"I32", "not F32"}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data.data()) % 64, 0u);
  EXPECT_TRUE(throwsError([] { Tensor::zeros(DType::F32, {-2}); }, {"[-2]"}));
}

TEST(TensorTest, TensorMapNamesAreUnique) {
  TensorMap m;
  m.insert("a", Tensor::zeros(DType::F32, {1}));
  EXPECT_TRUE(throwsError(
      [&] { m.insert("a", Tensor::zeros(DType::F32, {1})); }, {"'a'"}));
  EXPECT_TRUE(throwsError([&] { m.get("zz"); }, {"'zz'"}));
  EXPECT_EQ(m.find("zz"), nullptr);
  EXPECT_TRUE(m.contains("a"));
}

//===----------------------------------------------------------------------===//
// BF16 and F16: widened to F32 exactly on load
//===----------------------------------------------------------------------===//

namespace {

/// Independent fp64 value of an IEEE-style binary number with `expBits`
/// exponent bits and `mantBits` mantissa bits, from the textbook formula
/// (not from bit shifts). NaN for a NaN pattern.
double referenceValue(uint32_t bits, int expBits, int mantBits) {
  uint32_t mant = bits & ((1u << mantBits) - 1);
  uint32_t exp = (bits >> mantBits) & ((1u << expBits) - 1);
  double sign = (bits >> (expBits + mantBits)) & 1 ? -1.0 : 1.0;
  int bias = (1 << (expBits - 1)) - 1;
  double frac = static_cast<double>(mant) / std::ldexp(1.0, mantBits);
  if (exp == (1u << expBits) - 1)
    return mant ? std::nan("") : sign * HUGE_VAL;
  if (exp == 0)
    return sign * std::ldexp(frac, 1 - bias);
  return sign * std::ldexp(1.0 + frac, static_cast<int>(exp) - bias);
}

/// Whether `got` is exactly `want` (same bits for numbers, signed zeros
/// included; a NaN of the same sign for NaN).
::testing::AssertionResult sameValue(float got, double want, uint32_t bits) {
  if (std::isnan(want)) {
    if (std::isnan(got))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "0x" << std::hex << bits << ": got " << got << ", want NaN";
  }
  float wantF = static_cast<float>(want);
  if (static_cast<double>(wantF) != want)
    return ::testing::AssertionFailure()
           << "0x" << std::hex << bits << ": reference is not a float";
  uint32_t a, b;
  std::memcpy(&a, &got, 4);
  std::memcpy(&b, &wantF, 4);
  if (a == b)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "0x" << std::hex << bits << ": got " << got << ", want " << want;
}

/// Raw little-endian 2-byte data.
std::string halfData(const std::vector<uint16_t> &v) {
  std::string out(v.size() * 2, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

} // namespace

TEST(HalfFloatTest, EveryBF16IsExact) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits)
    ASSERT_TRUE(sameValue(bf16ToFloat(static_cast<uint16_t>(bits)),
                          referenceValue(bits, 8, 7), bits));
}

TEST(HalfFloatTest, EveryF16IsExact) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits)
    ASSERT_TRUE(sameValue(f16ToFloat(static_cast<uint16_t>(bits)),
                          referenceValue(bits, 5, 10), bits));
}

TEST(HalfFloatTest, SpecialValues) {
  EXPECT_EQ(f16ToFloat(0x7bff), 65504.0f);              // largest F16
  EXPECT_EQ(f16ToFloat(0x0400), std::ldexp(1.0f, -14)); // smallest normal
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(f16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(f16ToFloat(0x8000)) && f16ToFloat(0x8000) == 0);
  EXPECT_EQ(f16ToFloat(0xfc00), -HUGE_VALF);
  EXPECT_TRUE(std::isnan(f16ToFloat(0x7e00)));
  EXPECT_EQ(bf16ToFloat(0x7f7f), std::ldexp(255.0f, 120)); // largest BF16
  EXPECT_EQ(bf16ToFloat(0x0001), std::ldexp(1.0f, -133));  // smallest
  EXPECT_EQ(bf16ToFloat(0xff80), -HUGE_VALF);
  EXPECT_TRUE(std::isnan(bf16ToFloat(0xffc1)));
}

TEST_F(SafetensorsTest, LoadsBF16AndF16AsF32) {
  // Edge values plus random ones, both dtypes in one file, as checkpoints
  // written by PyTorch hold them.
  std::vector<uint16_t> bf = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0,
                              0x7f7f, 0x0001, 0x0080, 0x3f80, 0xc049};
  std::vector<uint16_t> hf = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00,
                              0x7bff, 0x0001, 0x03ff, 0x0400, 0x3c00};
  std::mt19937 gen(99);
  for (int i = 0; i < 54; ++i) {
    bf.push_back(static_cast<uint16_t>(gen()));
    hf.push_back(static_cast<uint16_t>(gen()));
  }
  std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("b":{"dtype":"BF16","shape":[8,8],"data_offsets":[0,128]},)"
      R"("h":{"dtype":"F16","shape":[4,16],"data_offsets":[128,256]}})";
  writeFile(file, rawFile(header, halfData(bf) + halfData(hf)));
  TensorMap m = TensorMap::load(file);
  const Tensor &b = m.get("b"), &h = m.get("h");
  EXPECT_EQ(b.dtype, DType::F32);
  EXPECT_EQ(b.fileDType, DType::BF16);
  EXPECT_EQ(h.dtype, DType::F32);
  EXPECT_EQ(h.fileDType, DType::F16);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(h.shape, (std::vector<int64_t>{4, 16}));
  ASSERT_EQ(b.byteSize(), 64u * 4);
  for (size_t i = 0; i < bf.size(); ++i) {
    EXPECT_TRUE(sameValue(b.f32()[i], referenceValue(bf[i], 8, 7), bf[i]));
    EXPECT_TRUE(sameValue(h.f32()[i], referenceValue(hf[i], 5, 10), hf[i]));
  }
  // Saved back, the tensors are F32 with the same values.
  std::string out = tmp.path("out.safetensors");
  m.save(out);
  TensorMap back = TensorMap::load(out);
  EXPECT_EQ(back.get("b").fileDType, DType::F32);
  EXPECT_EQ(std::memcmp(back.get("b").data.data(), b.data.data(), b.byteSize()),
            0);
}

TEST_F(SafetensorsTest, HalfSizesAreChecked) {
  // 2 bytes per element: [3] needs 6 bytes, and 4-byte data are refused.
  std::string h = R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(4, '\0')),
                        {"'w'", "hold 4 bytes", "BF16 [3] needs 6 bytes"}));
  h = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(8, '\0')),
                        {"'w'", "hold 8 bytes", "F16 [2] needs 4 bytes"}));
  h = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,3]}})";
  EXPECT_TRUE(loadFails(rawFile(h, std::string(3, '\0')),
                        {"'w'", "hold 3 bytes", "F16 [2] needs 4 bytes"}));
}
