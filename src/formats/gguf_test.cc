#include "kvferry/formats/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "formats/test_util.h"
#include "kvferry/common/half.h"
#include "kvferry/formats/gguf_writer.h"

namespace kvferry::formats {
namespace {

using testing::AsBytes;

// Builds GGUF bytes by hand, field by field, for the files the writer will not make.
class Raw {
 public:
  template <typename T>
  Raw& Put(T value) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
    return *this;
  }
  Raw& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    for (char c : s) bytes_.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Raw& KeyU32(const std::string& key, uint32_t value) {
    return Str(key).Put<uint32_t>(4).Put<uint32_t>(value);
  }
  // A tensor info; `ne` innermost first, as ggml stores it.
  Raw& Tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
              uint64_t offset) {
    Str(name).Put<uint32_t>(ne.size());
    for (uint64_t d : ne) Put<uint64_t>(d);
    return Put<uint32_t>(type).Put<uint64_t>(offset);
  }
  Raw& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n);
    return *this;
  }
  Raw& PadTo(size_t alignment) {
    return Zeros((alignment - bytes_.size() % alignment) % alignment);
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

Raw Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  Raw r;
  r.Put<uint32_t>(0x46554747u).Put<uint32_t>(version).Put<uint64_t>(tensors).Put<uint64_t>(kvs);
  return r;
}

StatusOr<GgufContents> ParseGgufBytes(const std::vector<std::byte>& bytes) {
  return ParseGguf(bytes, "t.gguf");
}

void ExpectGgufError(const std::vector<std::byte>& bytes, StatusCode code,
                     const std::string& part) {
  auto parsed = ParseGgufBytes(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_NE(parsed.status().message().find("GGUF 't.gguf'"), std::string_view::npos)
      << parsed.status();
  EXPECT_NE(parsed.status().message().find(part), std::string_view::npos) << parsed.status();
}

// A file with one tensor info and `data` zero bytes of data.
std::vector<std::byte> OneTensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset,
                                 size_t data) {
  return Header(1, 0).Tensor("w", ne, type, offset).PadTo(32).Zeros(data).bytes();
}

// ---- round trips ----

// One key of every type and array type.
std::vector<std::pair<std::string, GgufValue>> FullMetadata() {
  using T = GgufValueType;
  std::vector<std::pair<std::string, GgufValue>> kv;
  auto add = [&kv](const std::string& key, GgufValue v) { kv.emplace_back(key, std::move(v)); };
  add("general.architecture", GgufValue::String("llama"));
  add("u8", GgufValue::Int(T::kU8, 200));
  add("i8", GgufValue::Int(T::kI8, -100));
  add("u16", GgufValue::Int(T::kU16, 60000));
  add("i16", GgufValue::Int(T::kI16, -30000));
  add("u32", GgufValue::Int(T::kU32, 4000000000));
  add("i32", GgufValue::Int(T::kI32, -2000000000));
  add("u64", GgufValue::Int(T::kU64, -1));  // 2^64 - 1
  add("i64", GgufValue::Int(T::kI64, std::numeric_limits<int64_t>::min()));
  add("f32", GgufValue::Float(T::kF32, 0.1));
  add("f64", GgufValue::Float(T::kF64, 0.1));
  add("bool", GgufValue::Bool(true));
  add("empty_string", GgufValue::String(""));
  add("u8s", GgufValue::IntArray(T::kU8, {0, 255}));
  add("i8s", GgufValue::IntArray(T::kI8, {-128, 127}));
  add("u16s", GgufValue::IntArray(T::kU16, {1, 65535}));
  add("i16s", GgufValue::IntArray(T::kI16, {-32768}));
  add("u32s", GgufValue::IntArray(T::kU32, {7, 8, 9}));
  add("i32s", GgufValue::IntArray(T::kI32, {-1, 0, 1}));
  add("u64s", GgufValue::IntArray(T::kU64, {1, -2}));
  add("i64s", GgufValue::IntArray(T::kI64, {}));
  add("f32s", GgufValue::FloatArray(T::kF32, {0.5, -0.25, 1e30}));
  add("f64s", GgufValue::FloatArray(T::kF64, {1e300}));
  add("bools", GgufValue::BoolArray({false, true, true}));
  add("tokenizer.ggml.tokens", GgufValue::StringArray({"<s>", "", "héllo", std::string(1, '\0')}));
  return kv;
}

GgufWriter FullWriter() {
  GgufWriter w;
  for (auto& [key, value] : FullMetadata()) {
    const Status s = w.AddMetadata(key, value);
    EXPECT_TRUE(s.ok()) << key << ": " << s;
  }
  EXPECT_TRUE(w.SetAlignment(64).ok());
  std::vector<float> f32(12);
  for (int i = 0; i < 12; ++i) f32[i] = static_cast<float>(i) - 3.5f;
  const std::vector<uint16_t> f16{F32ToF16(1.0f), F32ToF16(2.0f), F32ToF16(-3.0f), 0};
  const std::vector<uint16_t> bf16{F32ToBF16(1.0f), F32ToBF16(-1.0f), 0, 1, 2};
  std::vector<std::byte> q4_0(2 * 18);
  for (size_t i = 0; i < q4_0.size(); ++i) q4_0[i] = static_cast<std::byte>(i);
  EXPECT_TRUE(w.AddTensor("token_embd.weight", DType::kF32, {3, 4}, AsBytes(f32)).ok());
  EXPECT_TRUE(w.AddTensor("f16", DType::kF16, {2, 2}, AsBytes(f16)).ok());
  EXPECT_TRUE(w.AddTensor("bf16", DType::kBF16, {5}, AsBytes(bf16)).ok());
  EXPECT_TRUE(w.AddTensor("scalar", DType::kF32, {}, AsBytes(std::vector<float>{9.0f})).ok());
  EXPECT_TRUE(w.AddTensor("q", DType::kQ4_0, {2, 32}, q4_0).ok());
  return w;
}

void ExpectFull(const GgufMetadata& metadata, const std::vector<TensorView>& tensors,
                const std::byte* base) {
  ASSERT_EQ(metadata.entries().size(), 26u);  // 25 added + general.alignment
  EXPECT_EQ(metadata.entries().back().first, "general.alignment");
  EXPECT_EQ(*metadata.GetInt("general.alignment"), 64);
  EXPECT_EQ(*metadata.GetString("general.architecture"), "llama");
  EXPECT_EQ(*metadata.GetInt("u8"), 200);
  EXPECT_EQ(*metadata.GetInt("i8"), -100);
  EXPECT_EQ(*metadata.GetInt("u16"), 60000);
  EXPECT_EQ(*metadata.GetInt("i16"), -30000);
  EXPECT_EQ(*metadata.GetInt("u32"), 4000000000);
  EXPECT_EQ(*metadata.GetInt("i32"), -2000000000);
  EXPECT_EQ(metadata.Find("u64")->ints, (std::vector<int64_t>{-1}));
  EXPECT_EQ(*metadata.GetInt("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*metadata.GetFloat("f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*metadata.GetFloat("f64"), 0.1);
  EXPECT_TRUE(*metadata.GetBool("bool"));
  EXPECT_EQ(*metadata.GetString("empty_string"), "");
  EXPECT_EQ(*metadata.GetIntArray("i8s"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(*metadata.GetIntArray("u32s"), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(*metadata.GetIntArray("i64s"), (std::vector<int64_t>{}));
  EXPECT_EQ(*metadata.GetFloatArray("f32s"),
            (std::vector<double>{0.5, -0.25, static_cast<double>(1e30f)}));
  EXPECT_EQ(metadata.Find("bools")->ints, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(*metadata.GetStringArray("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<s>", "", "héllo", std::string(1, '\0')}));
  // Every entry exactly as the writer was given it.
  const auto full = FullMetadata();
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(metadata.entries()[i], full[i]) << full[i].first;
  }

  ASSERT_EQ(tensors.size(), 5u);
  EXPECT_EQ(tensors[0].name, "token_embd.weight");
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{3, 4}));
  std::vector<float> f(12);
  ASSERT_TRUE(ReadAsF32(tensors[0], f).ok());
  EXPECT_EQ(f[5], 1.5f);
  EXPECT_EQ(tensors[1].dtype, DType::kF16);
  ASSERT_TRUE(ReadAsF32(tensors[1], std::span<float>(f.data(), 4)).ok());
  EXPECT_EQ(f[2], -3.0f);
  EXPECT_EQ(tensors[2].dtype, DType::kBF16);
  EXPECT_EQ(tensors[2].size_bytes, 10u);
  EXPECT_EQ(tensors[3].shape, (std::vector<int64_t>{}));
  EXPECT_EQ(tensors[4].dtype, DType::kQ4_0);
  EXPECT_EQ(tensors[4].shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(tensors[4].size_bytes, 36u);
  EXPECT_EQ(tensors[4].bytes()[35], std::byte{35});
  for (const TensorView& t : tensors) {
    EXPECT_EQ((t.data - base) % 64, 0) << t.name;  // every tensor at a multiple of the alignment
  }
}

TEST(GgufTest, RoundTripsEveryMetadataTypeAndTensors) {
  const std::vector<std::byte> bytes = FullWriter().Bytes();
  auto parsed = ParseGgufBytes(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->version, 3u);
  EXPECT_EQ(parsed->alignment, 64u);
  EXPECT_EQ(parsed->data_offset % 64, 0u);
  ExpectFull(parsed->metadata, parsed->tensors, bytes.data());
  EXPECT_EQ(bytes.size() % 64, 0u);  // the last tensor is padded too, as ggml writes it
}

TEST(GgufTest, FileRoundTrip) {
  testing::TempDir dir;
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE(FullWriter().Write(path).ok());
  EXPECT_EQ(testing::ReadFile(path), FullWriter().Bytes());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 64u);
  ExpectFull(file->metadata(), file->tensors(), file->tensors()[0].data);
  ASSERT_NE(file->Find("bf16"), nullptr);
  EXPECT_EQ(file->Find("bf16")->file, path);
  EXPECT_EQ(file->Get("output.weight").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(GgufFile::Open(dir.File("none")).status().code(), StatusCode::kNotFound);
}

// The writer's bytes are the layout the spec describes, field by field: ne[] is the row-major
// shape reversed, offsets count from the aligned data section, every tensor is padded.
TEST(GgufTest, WriterLayoutMatchesTheSpecByteForByte) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("general.architecture", GgufValue::String("llama")).ok());
  ASSERT_TRUE(w.AddMetadata("ids", GgufValue::IntArray(GgufValueType::kI16, {1, -1})).ok());
  std::vector<float> m(12, 1.0f), v(3, 2.0f);
  ASSERT_TRUE(w.AddTensor("m", DType::kF32, {3, 4}, AsBytes(m)).ok());
  ASSERT_TRUE(w.AddTensor("v", DType::kF32, {3}, AsBytes(v)).ok());
  Raw raw = Header(2, 2);
  raw.Str("general.architecture").Put<uint32_t>(8).Str("llama");
  raw.Str("ids").Put<uint32_t>(9).Put<uint32_t>(3).Put<uint64_t>(2).Put<int16_t>(1).Put<int16_t>(
      -1);
  raw.Tensor("m", {4, 3}, 0, 0).Tensor("v", {3}, 0, 64).PadTo(32);
  for (float x : m) raw.Put(x);
  raw.PadTo(32);
  for (float x : v) raw.Put(x);
  raw.PadTo(32);
  EXPECT_EQ(w.Bytes(), raw.bytes());
  auto parsed = ParseGgufBytes(raw.bytes());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors[0].shape, (std::vector<int64_t>{3, 4}));  // ne [4, 3] reversed
}

TEST(GgufTest, VersionTwoReadsLikeThree) {
  std::vector<std::byte> bytes = FullWriter().Bytes();
  bytes[4] = std::byte{2};
  auto parsed = ParseGgufBytes(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->version, 2u);
}

TEST(GgufTest, NoTensorsNeedNoPadding) {
  auto parsed = ParseGgufBytes(Header(0, 1).KeyU32("a", 1).bytes());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->tensors.empty());
}

// ---- errors ----

TEST(GgufTest, BadMagic) {
  std::vector<std::byte> bytes = FullWriter().Bytes();
  bytes[3] = std::byte{'L'};
  ExpectGgufError(bytes, StatusCode::kDataLoss, "not a GGUF file");
  ExpectGgufError({}, StatusCode::kDataLoss, "not a GGUF file");
}

TEST(GgufTest, UnsupportedVersions) {
  ExpectGgufError(Header(0, 0, 1).bytes(), StatusCode::kInvalidArgument,
                  "version 1 is not supported (2 and 3 are)");
  ExpectGgufError(Header(0, 0, 4).bytes(), StatusCode::kInvalidArgument, "version 4");
  ExpectGgufError(Header(0, 0, 0x03000000).bytes(), StatusCode::kInvalidArgument, "big-endian");
}

TEST(GgufTest, EveryTruncationIsDataLoss) {
  const std::vector<std::byte> bytes = FullWriter().Bytes();
  auto parsed = ParseGgufBytes(bytes);
  ASSERT_TRUE(parsed.ok());
  const TensorView& last = parsed->tensors.back();
  const size_t needed = static_cast<size_t>(last.data - bytes.data()) + last.size_bytes;
  for (size_t n = 0; n < needed; ++n) {
    const std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + n);
    auto cut = ParseGgufBytes(prefix);
    ASSERT_FALSE(cut.ok()) << n;
    ASSERT_EQ(cut.status().code(), StatusCode::kDataLoss) << n << ": " << cut.status();
  }
  EXPECT_TRUE(ParseGgufBytes({bytes.begin(), bytes.begin() + needed})
                  .ok());  // the last padding is optional
}

TEST(GgufTest, CountsThatLie) {
  ExpectGgufError(Header(uint64_t{1} << 60, 0).bytes(), StatusCode::kDataLoss,
                  "header claims 1152921504606846976 tensors");
  ExpectGgufError(Header(0, uint64_t{1} << 62).bytes(), StatusCode::kDataLoss,
                  "key-value pairs, more");
  ExpectGgufError(Header(~uint64_t{0}, ~uint64_t{0}).bytes(), StatusCode::kDataLoss,
                  "header claims");
  // Room for the claimed pair counts, but the pairs are not there.
  ExpectGgufError(Header(0, 2).KeyU32("a", 1).Zeros(16).bytes(), StatusCode::kDataLoss,
                  "key-value pair 1");
}

TEST(GgufTest, StringsAndArraysPastTheEnd) {
  ExpectGgufError(Header(0, 1).Put<uint64_t>(1000).Zeros(8).bytes(), StatusCode::kDataLoss,
                  "key-value pair 0: at byte 32: a key of 1000 bytes runs past the end");
  ExpectGgufError(
      Header(0, 1).Str("a").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(1ull << 40).bytes(),
      StatusCode::kDataLoss, "key 'a': array of 1099511627776 u32 cannot fit");
  ExpectGgufError(Header(0, 1)
                      .Str("a")
                      .Put<uint32_t>(9)
                      .Put<uint32_t>(8)
                      .Put<uint64_t>(2)
                      .Str("x")
                      .Put<uint64_t>(999)
                      .Zeros(8)
                      .bytes(),
                  StatusCode::kDataLoss, "key 'a': at byte");
  ExpectGgufError(Header(0, 1).Str("a").Put<uint32_t>(8).Put<uint64_t>(~uint64_t{0}).bytes(),
                  StatusCode::kDataLoss, "runs past the end");
}

TEST(GgufTest, BadValues) {
  ExpectGgufError(Header(0, 1).Str("a").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(0).bytes(),
                  StatusCode::kInvalidArgument, "key 'a': arrays of arrays are not supported");
  ExpectGgufError(Header(0, 1).Str("a").Put<uint32_t>(13).Zeros(8).bytes(), StatusCode::kDataLoss,
                  "key 'a': unknown value type 13");
  ExpectGgufError(Header(0, 1).Str("a").Put<uint32_t>(9).Put<uint32_t>(13).Put<uint64_t>(0).bytes(),
                  StatusCode::kDataLoss, "unknown array element type 13");
  ExpectGgufError(Header(0, 1).Str("a").Put<uint32_t>(7).Put<uint8_t>(2).bytes(),
                  StatusCode::kDataLoss, "key 'a': bool byte 2 is neither 0 nor 1");
  ExpectGgufError(Header(0, 2).KeyU32("a", 1).KeyU32("a", 2).bytes(), StatusCode::kDataLoss,
                  "key 'a' appears twice");
  ExpectGgufError(Header(0, 1).KeyU32("", 1).bytes(), StatusCode::kDataLoss, "empty key");
}

TEST(GgufTest, Alignment) {
  ExpectGgufError(Header(0, 1).Str("general.alignment").Put<uint32_t>(10).Put<uint64_t>(32).bytes(),
                  StatusCode::kDataLoss, "general.alignment must be a u32, found u64");
  ExpectGgufError(Header(0, 1).KeyU32("general.alignment", 48).bytes(), StatusCode::kDataLoss,
                  "general.alignment 48 is not a power of two");
  ExpectGgufError(Header(0, 1).KeyU32("general.alignment", 0).bytes(), StatusCode::kDataLoss,
                  "not a power of two");
  // Found by fuzz_gguf: a re-write padded the data section to 1 GiB.
  ExpectGgufError(Header(0, 1).KeyU32("general.alignment", 1u << 30).bytes(), StatusCode::kDataLoss,
                  "general.alignment 1073741824 is larger than 1048576");
  // With alignment 16 an offset of 16 is aligned.
  auto parsed = ParseGgufBytes(Header(1, 1)
                                   .KeyU32("general.alignment", 16)
                                   .Tensor("w", {4}, 0, 16)
                                   .PadTo(16)
                                   .Zeros(32)
                                   .bytes());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->alignment, 16u);
}

TEST(GgufTest, TensorShapesAndTypes) {
  ExpectGgufError(OneTensor({1, 1, 1, 1, 1}, 0, 0, 4), StatusCode::kInvalidArgument,
                  "tensor 'w': 5 dimensions (GGUF has at most 4)");
  ExpectGgufError(OneTensor({4}, 31, 0, 16), StatusCode::kInvalidArgument,
                  "tensor 'w': ggml type id 31 is not one kvferry knows");
  ExpectGgufError(OneTensor({4}, 1000, 0, 16), StatusCode::kInvalidArgument, "ggml type id 1000");
  ExpectGgufError(OneTensor({16}, 2, 0, 32), StatusCode::kDataLoss,
                  "tensor 'w': rows of 16 are not whole Q4_0 blocks of 32");
  ExpectGgufError(OneTensor({uint64_t{1} << 63}, 0, 0, 0), StatusCode::kDataLoss,
                  "is above 2^63 - 1");
  ExpectGgufError(OneTensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 0), StatusCode::kDataLoss,
                  "more than 2^63 elements");
  ExpectGgufError(
      Header(2, 0).Tensor("w", {4}, 0, 0).Tensor("w", {4}, 0, 32).PadTo(32).Zeros(64).bytes(),
      StatusCode::kDataLoss, "two tensors are named 'w'");
}

TEST(GgufTest, QuantizedTensorsAreReadAndNamedWhenRefused) {
  auto parsed = ParseGgufBytes(OneTensor({256, 2}, 12, 0, 288));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const TensorView& t = parsed->tensors[0];
  EXPECT_EQ(t.dtype, DType::kQ4_K);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(t.size_bytes, 288u);
  std::vector<float> out(512);
  const Status s = ReadAsF32(t, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor 'w' in 't.gguf' has dtype Q4_K; expected F32, F16 or BF16");
}

TEST(GgufTest, TensorPlacement) {
  ExpectGgufError(OneTensor({4}, 0, 4, 32), StatusCode::kDataLoss,
                  "tensor 'w': offset 4 is not a multiple of the alignment 32");
  ExpectGgufError(OneTensor({8}, 0, 32, 32), StatusCode::kDataLoss,
                  "tensor 'w': bytes [32, +32) run past the end of the data section (32 bytes)");
  ExpectGgufError(OneTensor({8}, 0, ~uint64_t{0} - 31, 32), StatusCode::kDataLoss,
                  "run past the end");
  ExpectGgufError(
      Header(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {16}, 0, 32).PadTo(32).Zeros(96).bytes(),
      StatusCode::kDataLoss, "tensors 'a' and 'b' overlap");
  ExpectGgufError(Header(1, 0).Tensor("w", {0}, 0, 0).bytes(), StatusCode::kDataLoss,
                  "the data section would start at byte 64");  // infos end at 57
  // Empty tensors occupy nothing, so they overlap nothing.
  EXPECT_TRUE(
      ParseGgufBytes(
          Header(2, 0).Tensor("a", {0}, 0, 0).Tensor("b", {4}, 0, 0).PadTo(32).Zeros(16).bytes())
          .ok());
}

TEST(GgufWriterTest, RefusesWhatItCannotWrite) {
  GgufWriter w;
  using T = GgufValueType;
  EXPECT_EQ(w.SetAlignment(48).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.SetAlignment(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddMetadata("", GgufValue::Bool(true)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddMetadata("general.alignment", GgufValue::Int(T::kU32, 64)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddMetadata("a", GgufValue::Int(T::kU8, 256)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddMetadata("a", GgufValue::IntArray(T::kI8, {1, -129})).code(),
            StatusCode::kInvalidArgument);
  GgufValue two = GgufValue::Int(T::kU32, 1);
  two.ints.push_back(2);
  EXPECT_EQ(w.AddMetadata("a", two).code(), StatusCode::kInvalidArgument);
  GgufValue mixed = GgufValue::Int(T::kU32, 1);
  mixed.strings.push_back("x");
  EXPECT_EQ(w.AddMetadata("a", mixed).code(), StatusCode::kInvalidArgument);
  GgufValue bad_bool = GgufValue::Bool(true);
  bad_bool.ints[0] = 2;
  EXPECT_EQ(w.AddMetadata("a", bad_bool).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.AddMetadata("a", GgufValue::Int(T::kU8, 255)).ok());
  EXPECT_EQ(w.AddMetadata("a", GgufValue::Int(T::kU8, 1)).code(), StatusCode::kAlreadyExists);

  const std::vector<float> four(4);
  EXPECT_EQ(w.AddTensor(std::string(64, 'n'), DType::kF32, {4}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.AddTensor(std::string(63, 'n'), DType::kF32, {4}, AsBytes(four)).ok());
  EXPECT_EQ(w.AddTensor(std::string(63, 'n'), DType::kF32, {4}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(w.AddTensor("u8", DType::kU8, {16}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);  // no such ggml type
  EXPECT_EQ(w.AddTensor("5d", DType::kI8, {1, 1, 1, 1, 16}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("q", DType::kQ4_0, {32, 1}, std::vector<std::byte>(18)).code(),
            StatusCode::kInvalidArgument);  // rows of 1, not whole blocks of 32
  EXPECT_EQ(w.AddTensor("short", DType::kF32, {5}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::formats
