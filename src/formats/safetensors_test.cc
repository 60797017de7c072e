#include "kvferry/formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/test_util.h"
#include "kvferry/common/half.h"
#include "kvferry/formats/safetensors_writer.h"

namespace kvferry::formats {
namespace {

using testing::AsBytes;

// A file with this header text and `data_bytes` zero bytes of data.
std::vector<std::byte> RawFile(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

StatusOr<SafetensorsContents> Parse(const std::vector<std::byte>& bytes) {
  return ParseSafetensors(bytes, "t.safetensors");
}

// The error of parsing `bytes`: its code and that the message names the file and `part`.
void ExpectError(const std::vector<std::byte>& bytes, StatusCode code, const std::string& part) {
  auto parsed = Parse(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_NE(parsed.status().message().find("'t.safetensors'"), std::string_view::npos)
      << parsed.status();
  EXPECT_NE(parsed.status().message().find(part), std::string_view::npos) << parsed.status();
}

void ExpectError(const std::string& header, size_t data_bytes, StatusCode code,
                 const std::string& part) {
  ExpectError(RawFile(header, data_bytes), code, part);
}

struct Sample {
  std::vector<float> f32{1.5f, -2.0f, 0.25f, 4.0f, 5.0f, -6.0f};
  std::vector<uint16_t> f16{F32ToF16(1.0f), F32ToF16(-0.5f), F32ToF16(3.0f), F32ToF16(7.0f)};
  std::vector<uint16_t> bf16{F32ToBF16(2.0f), F32ToBF16(-8.0f)};
};

SafetensorsWriter SampleWriter(const Sample& s) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.SetMetadata("kvferry_config", R"({"vocab_size": 8})");
  EXPECT_TRUE(w.AddTensor("model.embed_tokens.weight", DType::kF32, {2, 3}, AsBytes(s.f32)).ok());
  EXPECT_TRUE(w.AddTensor("b.f16", DType::kF16, {4}, AsBytes(s.f16)).ok());
  EXPECT_TRUE(w.AddTensor("a.bf16", DType::kBF16, {1, 2}, AsBytes(s.bf16)).ok());
  return w;
}

void ExpectSample(const std::vector<TensorView>& tensors, const Sample& s) {
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "model.embed_tokens.weight");  // data-buffer order = added order
  EXPECT_EQ(tensors[0].dtype, DType::kF32);
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensors[1].dtype, DType::kF16);
  EXPECT_EQ(tensors[1].shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(tensors[2].dtype, DType::kBF16);
  EXPECT_EQ(tensors[2].shape, (std::vector<int64_t>{1, 2}));
  std::vector<float> f(6);
  ASSERT_TRUE(ReadAsF32(tensors[0], f).ok());
  EXPECT_EQ(f, s.f32);
  EXPECT_EQ(std::memcmp(tensors[1].data, s.f16.data(), 8), 0);
  EXPECT_EQ(std::memcmp(tensors[2].data, s.bf16.data(), 4), 0);
}

TEST(SafetensorsTest, RoundTripsBytesAndMetadata) {
  Sample s;
  const std::vector<std::byte> bytes = SampleWriter(s).Bytes();
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);  // padded so that the data buffer is 8-aligned
  auto parsed = Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata.size(), 2u);
  EXPECT_EQ(parsed->metadata.at("kvferry_config"), R"({"vocab_size": 8})");
  ExpectSample(parsed->tensors, s);
  EXPECT_EQ(parsed->tensors[0].file, "t.safetensors");
}

TEST(SafetensorsTest, FileRoundTripAndLookup) {
  testing::TempDir dir;
  Sample s;
  const std::string path = dir.File("m.safetensors");
  ASSERT_TRUE(SampleWriter(s).Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ExpectSample(file->tensors(), s);
  ASSERT_NE(file->Find("b.f16"), nullptr);
  EXPECT_EQ(file->Find("b.f16")->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(file->Find("nope"), nullptr);
  auto missing = file->Get("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string_view::npos);
  EXPECT_NE(missing.status().message().find(path), std::string_view::npos);
  EXPECT_EQ(testing::ReadFile(path), SampleWriter(s).Bytes());
  EXPECT_EQ(SafetensorsFile::Open(dir.File("none")).status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, ScalarsEmptyTensorsAndPaddingAreValid) {
  auto parsed = Parse(RawFile(R"({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},)"
                              R"( "e": {"dtype": "F16", "shape": [0, 7], "data_offsets": [4, 4]}})"
                              "      ",
                              4));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tensors.size(), 2u);
  EXPECT_EQ(parsed->tensors[0].name, "s");
  EXPECT_EQ(parsed->tensors[0].elements(), 1);
  EXPECT_EQ(parsed->tensors[1].elements(), 0);
  EXPECT_TRUE(Parse(RawFile("{}", 0)).ok());  // no tensors at all
}

TEST(SafetensorsTest, OtherDTypesAreReadAndNamedWhenRefused) {
  auto parsed = Parse(RawFile(R"({"q": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]},)"
                              R"( "i": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]}})",
                              12));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors[0].dtype, DType::kF8_E4M3);
  const Status s = RequireDType(parsed->tensors[0], {DType::kF32});
  EXPECT_NE(s.message().find("has dtype F8_E4M3"), std::string_view::npos) << s;
  EXPECT_EQ(parsed->tensors[1].dtype, DType::kI64);
}

TEST(SafetensorsTest, TruncatedFile) {
  ExpectError(std::vector<std::byte>(5), StatusCode::kDataLoss, "shorter than the 8-byte");
  ExpectError(std::vector<std::byte>(), StatusCode::kDataLoss, "shorter than the 8-byte");
}

TEST(SafetensorsTest, HeaderLengthPastTheFile) {
  std::vector<std::byte> bytes = RawFile("{}", 0);
  bytes[0] = std::byte{3};  // claims 3 bytes, has 2
  ExpectError(bytes, StatusCode::kDataLoss, "runs past the end of the file");
  bytes[0] = std::byte{0};
  bytes[5] = std::byte{1};  // 2^40
  ExpectError(bytes, StatusCode::kDataLoss, "over the limit");
}

TEST(SafetensorsTest, HeaderNotAJsonObject) {
  ExpectError("[1, 2]", 0, StatusCode::kDataLoss, "not a JSON object");
  ExpectError("{\"a\": ", 0, StatusCode::kDataLoss, "not a JSON object");
  ExpectError(" {}", 0, StatusCode::kDataLoss, "not a JSON object");  // must start with '{'
  ExpectError("{} x", 0, StatusCode::kDataLoss, "not a JSON object");
}

TEST(SafetensorsTest, DuplicateNames) {
  ExpectError(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
              R"( "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
              2, StatusCode::kDataLoss, "names 'a' twice");
}

TEST(SafetensorsTest, Metadata) {
  ExpectError(R"({"__metadata__": [1]})", 0, StatusCode::kDataLoss, "__metadata__ is not an");
  ExpectError(R"({"__metadata__": {"n": 1}})", 0, StatusCode::kDataLoss,
              "__metadata__ 'n' is not a string");
}

TEST(SafetensorsTest, BadOrMissingFields) {
  const std::string tail = ", \"data_offsets\": [0, 4]}}";
  ExpectError(R"({"t": 5})", 4, StatusCode::kDataLoss, "tensor 't': entry is not an object");
  ExpectError(R"({"t": {"shape": [1])" + tail, 4, StatusCode::kDataLoss, "tensor 't': no dtype");
  ExpectError(R"({"t": {"dtype": 3, "shape": [1])" + tail, 4, StatusCode::kDataLoss, "no dtype");
  ExpectError(R"({"t": {"dtype": "F32")" + tail, 4, StatusCode::kDataLoss, "no shape");
  ExpectError(R"({"t": {"dtype": "F32", "shape": 1)" + tail, 4, StatusCode::kDataLoss,
              "shape is not an array");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [-1])" + tail, 4, StatusCode::kDataLoss,
              "shape holds -1");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [1.5])" + tail, 4, StatusCode::kDataLoss,
              "shape holds 1.5");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [1]}})", 4, StatusCode::kDataLoss,
              "no data_offsets");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8,
              StatusCode::kDataLoss, "not [begin, end]");
}

TEST(SafetensorsTest, UnknownDTypeIsNamed) {
  ExpectError(R"({"t": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})", 4,
              StatusCode::kInvalidArgument, "tensor 't': unknown dtype 'F12'");
}

TEST(SafetensorsTest, OffsetsOutOfRange) {
  ExpectError(R"({"t": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})", 4,
              StatusCode::kDataLoss, "tensor 't': data_offsets end 2 is before begin 4");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4,
              StatusCode::kDataLoss, "tensor 't': data_offsets end 8 is past the data buffer");
  ExpectError(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]}})",
              4, StatusCode::kDataLoss, "not an integer in [0, 2^63)");
}

TEST(SafetensorsTest, SizeMustMatchTheShape) {
  ExpectError(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
              StatusCode::kDataLoss, "tensor 't': holds 8 bytes, but its shape of F32 takes 12");
  ExpectError(
      R"({"t": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8,
      StatusCode::kDataLoss, "more than 2^63 elements");
  ExpectError(R"({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}})", 2,
              StatusCode::kDataLoss, "not whole blocks");
}

TEST(SafetensorsTest, OverlapsGapsAndTrailingBytes) {
  ExpectError(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
              R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
              6, StatusCode::kDataLoss, "tensor 'b': overlaps tensor 'a'");
  ExpectError(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
              R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
              4, StatusCode::kDataLoss, "overlaps tensor");
  ExpectError(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
              R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})",
              6, StatusCode::kDataLoss, "data bytes [2, 4) belong to no tensor");
  ExpectError(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 5,
              StatusCode::kDataLoss, "data bytes [2, 5) belong to no tensor");
}

TEST(SafetensorsWriterTest, RefusesBadTensors) {
  SafetensorsWriter w;
  const std::vector<float> four(4);
  EXPECT_TRUE(w.AddTensor("a", DType::kF32, {4}, AsBytes(four)).ok());
  EXPECT_EQ(w.AddTensor("a", DType::kF32, {4}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(w.AddTensor("__metadata__", DType::kF32, {4}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("b", DType::kF32, {3}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);  // 16 bytes for 12
  EXPECT_EQ(w.AddTensor("c", DType::kQ4_0, {32}, std::vector<std::byte>(18)).code(),
            StatusCode::kInvalidArgument);  // a GGUF type
  EXPECT_EQ(w.AddTensor("d", DType::kF32, {-4}, AsBytes(four)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.AddTensor("e", DType::kI8, {16}, AsBytes(four)).ok());
}

}  // namespace
}  // namespace kvferry::formats
