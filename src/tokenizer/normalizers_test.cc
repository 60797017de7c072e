#include "tokenizer/normalizers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::tokenizer {
namespace {

StatusOr<std::string> RunNormalizer(const nlohmann::json& config, std::string text,
                                    size_t max_bytes = 1 << 20) {
  KVF_ASSIGN_OR_RETURN(auto n,
                       NormalizerFromJson(JsonSection(config, "tokenizer.json", "normalizer")));
  KVF_RETURN_IF_ERROR(n->Normalize(&text, max_bytes));
  return text;
}

std::string Normalized(const nlohmann::json& config, std::string text) {
  StatusOr<std::string> out = RunNormalizer(config, std::move(text));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::string();
}

TEST(NormalizersTest, UnicodeForms) {
  EXPECT_EQ(Normalized({{"type", "NFC"}}, "cafe\xCC\x81"), "caf\xC3\xA9");
  EXPECT_EQ(Normalized({{"type", "NFD"}}, "caf\xC3\xA9"), "cafe\xCC\x81");
  EXPECT_EQ(Normalized({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");  // the ligature ﬁ
  EXPECT_EQ(Normalized({{"type", "NFKD"}}, "\xE2\x91\xA0"), "1");   // ①
}

TEST(NormalizersTest, LowercaseIncludesTheMultiCharacterMapping) {
  EXPECT_EQ(Normalized({{"type", "Lowercase"}},
                       "\xC3\x80"
                       "B\xC4\xB0"),
            "\xC3\xA0"
            "bi\xCC\x87");
}

TEST(NormalizersTest, StripPrependReplaceSequence) {
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                       " \t\xE3\x80\x80x  "),
            "x  ");
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, "   "),
            "");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, "hi"), "\xE2\x96\x81hi");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, ""), "");
  EXPECT_EQ(Normalized({{"type", "Replace"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"content", "_"}},
                       "a  b\tc"),
            "a_b_c");
  const nlohmann::json llama = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(Normalized(llama, "Hello world"), "\xE2\x96\x81Hello\xE2\x96\x81world");
}

TEST(NormalizersTest, GrowthBeyondTheBudgetIsAnError) {
  // An empty regex matches between all characters: each pass multiplies the text.
  const nlohmann::json grow = {
      {"type", "Replace"}, {"pattern", {{"Regex", ""}}}, {"content", "0123456789"}};
  StatusOr<std::string> out = RunNormalizer(grow, std::string(1000, 'a'), 4096);
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
}

TEST(NormalizersTest, UnsupportedTypeNamesSectionAndType) {
  StatusOr<std::string> out = RunNormalizer({{"type", "BertNormalizer"}}, "x");
  EXPECT_EQ(out.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(out.status().message(),
            "tokenizer.json: normalizer: unsupported normalizer type \"BertNormalizer\"");
  StatusOr<std::string> nested = RunNormalizer(
      {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}}, "x");
  EXPECT_NE(nested.status().message().find("normalizer.normalizers[1]"), std::string_view::npos)
      << nested.status();
}

TEST(NormalizersTest, MalformedSectionsAreInvalid) {
  EXPECT_EQ(
      RunNormalizer({{"type", "Replace"}, {"pattern", {{"Regex", "("}}}, {"content", ""}}, "x")
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNormalizer({{"type", "Prepend"}}, "x").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNormalizer({{"no_type", 1}}, "x").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::tokenizer
