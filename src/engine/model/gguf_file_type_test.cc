// The quantized GGUF file types: each tensor's type as llama-quantize assigns it (the _M mixtures'
// layers with more bits, the output's Q6_K, the fallbacks for rows that are not whole
// super-blocks) and --pure.
#include "engine/model/gguf_file_type.h"

#include <gtest/gtest.h>

#include <string>

namespace kvferry::engine {
namespace {

using formats::DType;

GgufFileType Type(const std::string& name, bool pure = false) {
  auto t = GgufFileTypeFromName(name);
  EXPECT_TRUE(t.has_value()) << name;
  GgufFileType out = t.value_or(GgufFileType{});
  out.pure = pure;
  return out;
}

std::string Layer(int l, const std::string& name) {
  return "blk." + std::to_string(l) + "." + name + ".weight";
}

TEST(GgufFileTypeTest, NamesAndLlamaFileTypes) {
  EXPECT_EQ(GgufFileTypeNames(),
            "q8_0, q4_0, q5_0, q4_1, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k");
  EXPECT_EQ(Type("q4_k_m").base, DType::kQ4_K);
  EXPECT_EQ(Type("q4_k_m").llama_ftype, 15);
  EXPECT_EQ(Type("q5_k_m").llama_ftype, 17);
  EXPECT_EQ(Type("q6_k").llama_ftype, 18);
  EXPECT_EQ(Type("q8_0").llama_ftype, 7);
  EXPECT_FALSE(GgufFileTypeFromName("q3_k_m").has_value());
  EXPECT_FALSE(GgufFileTypeFromName("Q4_K_M").has_value());
}

// 8 layers: use_more_bits picks layers 0 and 7 (the first and last eighth) and 3 and 6 (every
// third between).
TEST(GgufFileTypeTest, MediumMixturesGiveAttnVAndFfnDownSixBitsInTheLayersThatNeedThem) {
  for (const char* name : {"q4_k_m", "q5_k_m"}) {
    const GgufFileType t = Type(name);
    for (int l = 0; l < 8; ++l) {
      const bool more = l == 0 || l == 3 || l == 6 || l == 7;
      EXPECT_EQ(GgufTensorType(t, Layer(l, "attn_v"), 8, 1024, true), more ? DType::kQ6_K : t.base)
          << name << " layer " << l;
      EXPECT_EQ(GgufTensorType(t, Layer(l, "ffn_down"), 8, 3072, true),
                more ? DType::kQ6_K : t.base)
          << name << " layer " << l;
      EXPECT_EQ(GgufTensorType(t, Layer(l, "attn_q"), 8, 1024, true), t.base);
      EXPECT_EQ(GgufTensorType(t, Layer(l, "ffn_gate"), 8, 1024, true), t.base);
    }
    EXPECT_EQ(GgufTensorType(t, "output.weight", 8, 1024, true), DType::kQ6_K);
    EXPECT_EQ(GgufTensorType(t, "token_embd.weight", 8, 1024, true), t.base);
    // Tied: the embedding is the output.
    EXPECT_EQ(GgufTensorType(t, "token_embd.weight", 8, 1024, false), DType::kQ6_K);
  }
}

TEST(GgufFileTypeTest, SmallMixtureAndUniformTypes) {
  const GgufFileType s = Type("q4_k_s");
  EXPECT_EQ(GgufTensorType(s, Layer(3, "attn_v"), 16, 1024, true), DType::kQ5_K);
  EXPECT_EQ(GgufTensorType(s, Layer(4, "attn_v"), 16, 1024, true), DType::kQ4_K);
  EXPECT_EQ(GgufTensorType(s, Layer(1, "ffn_down"), 16, 1024, true), DType::kQ5_K);
  EXPECT_EQ(GgufTensorType(s, Layer(2, "ffn_down"), 16, 1024, true), DType::kQ4_K);
  EXPECT_EQ(GgufTensorType(Type("q5_k_s"), Layer(0, "attn_v"), 16, 1024, true), DType::kQ5_K);
  EXPECT_EQ(GgufTensorType(Type("q6_k"), Layer(0, "attn_q"), 16, 1024, true), DType::kQ6_K);
  // The 32-value types: every matrix in the type, the output in Q6_K (Q8_0 for q8_0).
  EXPECT_EQ(GgufTensorType(Type("q4_0"), Layer(0, "ffn_down"), 16, 1024, true), DType::kQ4_0);
  EXPECT_EQ(GgufTensorType(Type("q4_0"), "output.weight", 16, 1024, true), DType::kQ6_K);
  EXPECT_EQ(GgufTensorType(Type("q8_0"), "output.weight", 16, 1024, true), DType::kQ8_0);
}

TEST(GgufFileTypeTest, RowsThatAreNotWholeSuperBlocksFallBackAsLlamaQuantizeDoes) {
  EXPECT_EQ(GgufTensorType(Type("q4_k_m"), Layer(1, "attn_q"), 8, 896, true), DType::kQ5_0);
  EXPECT_EQ(GgufTensorType(Type("q5_k_m"), Layer(1, "attn_q"), 8, 896, true), DType::kQ5_1);
  EXPECT_EQ(GgufTensorType(Type("q4_k_m"), Layer(0, "attn_v"), 8, 896, true), DType::kQ8_0);
  EXPECT_EQ(GgufTensorType(Type("q4_0"), "output.weight", 8, 128, true), DType::kQ8_0);
  // Not even whole blocks of 32: F16.
  EXPECT_EQ(GgufTensorType(Type("q6_k"), Layer(0, "attn_q"), 8, 100, true), DType::kF16);
  // A 32-value type keeps its type; the writer refuses the rows.
  EXPECT_EQ(GgufTensorType(Type("q4_0"), Layer(0, "attn_q"), 8, 100, true), DType::kQ4_0);
}

TEST(GgufFileTypeTest, PurePutsEveryMatrixInTheBaseType) {
  const GgufFileType t = Type("q4_k_m", /*pure=*/true);
  EXPECT_EQ(GgufTensorType(t, Layer(0, "attn_v"), 8, 1024, true), DType::kQ4_K);
  EXPECT_EQ(GgufTensorType(t, "output.weight", 8, 1024, true), DType::kQ4_K);
  EXPECT_EQ(GgufTensorType(t, "token_embd.weight", 8, 1024, false), DType::kQ4_K);
  EXPECT_EQ(GgufTensorType(t, Layer(0, "attn_q"), 8, 896, true), DType::kQ5_0);  // still falls back
}

}  // namespace
}  // namespace kvferry::engine
