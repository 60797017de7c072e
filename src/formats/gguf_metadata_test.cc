#include "kvferry/formats/gguf_metadata.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvferry::formats {
namespace {

GgufMetadata Sample() {
  GgufMetadata m("m.gguf");
  EXPECT_TRUE(m.Add("general.architecture", GgufValue::String("llama")).ok());
  EXPECT_TRUE(m.Add("llama.block_count", GgufValue::Int(GgufValueType::kU32, 2)).ok());
  EXPECT_TRUE(m.Add("small", GgufValue::Int(GgufValueType::kI8, -3)).ok());
  EXPECT_TRUE(m.Add("huge", GgufValue::Int(GgufValueType::kU64, -1)).ok());  // 2^64 - 1
  EXPECT_TRUE(m.Add("eps", GgufValue::Float(GgufValueType::kF32, 1e-5)).ok());
  EXPECT_TRUE(m.Add("theta", GgufValue::Float(GgufValueType::kF64, 500000.0)).ok());
  EXPECT_TRUE(m.Add("flag", GgufValue::Bool(true)).ok());
  EXPECT_TRUE(m.Add("tokens", GgufValue::StringArray({"<s>", "a", ""})).ok());
  EXPECT_TRUE(m.Add("types", GgufValue::IntArray(GgufValueType::kI32, {1, -2, 3})).ok());
  EXPECT_TRUE(m.Add("scores", GgufValue::FloatArray(GgufValueType::kF32, {0.5, -1.0})).ok());
  EXPECT_TRUE(m.Add("flags", GgufValue::BoolArray({true, false})).ok());
  return m;
}

TEST(GgufMetadataTest, TypedAccessors) {
  const GgufMetadata m = Sample();
  EXPECT_EQ(*m.GetString("general.architecture"), "llama");
  EXPECT_EQ(*m.GetInt("llama.block_count"), 2);
  EXPECT_EQ(*m.GetInt("small"), -3);
  EXPECT_EQ(*m.GetFloat("eps"), static_cast<double>(1e-5f));  // f32: rounded to float
  EXPECT_EQ(*m.GetFloat("theta"), 500000.0);
  EXPECT_TRUE(*m.GetBool("flag"));
  EXPECT_EQ(*m.GetStringArray("tokens"), (std::vector<std::string>{"<s>", "a", ""}));
  EXPECT_EQ(*m.GetIntArray("types"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*m.GetFloatArray("scores"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(m.entries().size(), 11u);
  EXPECT_EQ(m.entries()[1].first, "llama.block_count");  // file order
  EXPECT_EQ(m.Find("flags")->TypeName(), "array of bool");
}

TEST(GgufMetadataTest, ErrorsNameKeyAndTypes) {
  const GgufMetadata m = Sample();
  auto missing = m.GetString("general.name");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "GGUF 'm.gguf' has no key 'general.name'");
  auto wrong = m.GetString("llama.block_count");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(),
            "GGUF 'm.gguf': key 'llama.block_count': expected string, found u32");
  EXPECT_EQ(m.GetInt("flag").status().message(),
            "GGUF 'm.gguf': key 'flag': expected integer, found bool");
  EXPECT_EQ(m.GetFloat("llama.block_count").status().message(),
            "GGUF 'm.gguf': key 'llama.block_count': expected f32 or f64, found u32");
  EXPECT_EQ(m.GetBool("flags").status().message(),
            "GGUF 'm.gguf': key 'flags': expected bool, found array of bool");
  EXPECT_EQ(m.GetStringArray("types").status().message(),
            "GGUF 'm.gguf': key 'types': expected array of string, found array of i32");
  EXPECT_EQ(m.GetIntArray("tokens").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.GetFloatArray("eps").status().message(),
            "GGUF 'm.gguf': key 'eps': expected array of f32 or f64, found f32");
  auto huge = m.GetInt("huge");
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(huge.status().message().find("18446744073709551615"), std::string_view::npos);
}

TEST(GgufMetadataTest, KeysAreUnique) {
  GgufMetadata m = Sample();
  EXPECT_EQ(m.Add("flag", GgufValue::Bool(false)).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(*m.GetBool("flag"));
}

}  // namespace
}  // namespace kvferry::formats
