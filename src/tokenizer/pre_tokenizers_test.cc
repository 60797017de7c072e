#include "tokenizer/pre_tokenizers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::tokenizer {
namespace {

using V = std::vector<std::string>;

StatusOr<V> RunPreTokenizer(const nlohmann::json& config, const std::string& text,
                            bool at_start = true) {
  KVF_ASSIGN_OR_RETURN(
      auto pre, PreTokenizerFromJson(JsonSection(config, "tokenizer.json", "pre_tokenizer")));
  std::vector<PreToken> words{{text, at_start}};
  KVF_RETURN_IF_ERROR(pre->PreTokenize(&words, 1 << 20));
  V out;
  for (const PreToken& w : words) out.push_back(w.text);
  return out;
}

V PreTokenized(const nlohmann::json& config, const std::string& text, bool at_start = true) {
  StatusOr<V> out = RunPreTokenizer(config, text, at_start);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : V{};
}

TEST(PreTokenizersTest, ByteLevelWithGpt2Regex) {
  const nlohmann::json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  EXPECT_EQ(PreTokenized(bl, "Hello world!"), (V{"Hello", "\xC4\xA0world", "!"}));  // Ġworld
  const nlohmann::json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  EXPECT_EQ(PreTokenized(prefixed, "Hi"), (V{"\xC4\xA0Hi"}));
  const nlohmann::json bytes_only = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(PreTokenized(bytes_only, "a b\n\xC3\xA9"), (V{"a\xC4\xA0"
                                                          "b\xC4\x8A\xC3\x83\xC2\xA9"}));
}

TEST(PreTokenizersTest, SplitFromJson) {
  const nlohmann::json digits3 = {{"type", "Split"},
                                  {"pattern", {{"Regex", R"(\p{N}{1,3})"}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}};
  EXPECT_EQ(PreTokenized(digits3, "x1234567"), (V{"x", "123", "456", "7"}));
  const nlohmann::json removed = {{"type", "Split"},
                                  {"pattern", {{"String", ","}}},
                                  {"behavior", "Removed"},
                                  {"invert", false}};
  EXPECT_EQ(PreTokenized(removed, "a,b,,c"), (V{"a", "b", "c"}));
}

// Hugging Face's tests for Metaspace (pre_tokenizers/metaspace.rs) and Digits (digits.rs).
TEST(PreTokenizersTest, MetaspaceAsTokenizersTests) {
  const nlohmann::json always = {{"type", "Metaspace"},
                                 {"replacement", "\xE2\x96\x81"},
                                 {"prepend_scheme", "always"},
                                 {"split", true}};
  EXPECT_EQ(PreTokenized(always, "Hey friend!"), (V{"\xE2\x96\x81Hey",
                                                    "\xE2\x96\x81"
                                                    "friend!"}));
  EXPECT_EQ(PreTokenized(always, "Hey   friend!"),
            (V{"\xE2\x96\x81Hey", "\xE2\x96\x81", "\xE2\x96\x81",
               "\xE2\x96\x81"
               "friend!"}));
  const nlohmann::json first = {{"type", "Metaspace"},
                                {"replacement", "\xE2\x96\x81"},
                                {"prepend_scheme", "first"},
                                {"split", false}};
  EXPECT_EQ(PreTokenized(first, "Hey friend", /*at_start=*/true), (V{"\xE2\x96\x81Hey\xE2\x96\x81"
                                                                     "friend"}));
  EXPECT_EQ(PreTokenized(first, "Hey friend", /*at_start=*/false), (V{"Hey\xE2\x96\x81"
                                                                      "friend"}));
}

TEST(PreTokenizersTest, DigitsAsTokenizersTests) {
  EXPECT_EQ(PreTokenized({{"type", "Digits"}, {"individual_digits", false}}, "Hey 123 friend!"),
            (V{"Hey ", "123", " friend!"}));
  EXPECT_EQ(PreTokenized({{"type", "Digits"}, {"individual_digits", true}}, "Hey 123 friend!"),
            (V{"Hey ", "1", "2", "3", " friend!"}));
}

TEST(PreTokenizersTest, SequenceAppliesInOrder) {
  const nlohmann::json seq = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(PreTokenized(seq, "a 12"), (V{"a\xC4\xA0", "1", "2"}));
}

TEST(PreTokenizersTest, UnsupportedAndMalformed) {
  StatusOr<V> ws = RunPreTokenizer({{"type", "Whitespace"}}, "x");
  EXPECT_EQ(ws.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(
      ws.status().message().find("pre_tokenizer: unsupported pre_tokenizer type \"Whitespace\""),
      std::string_view::npos);
  EXPECT_EQ(RunPreTokenizer(
                {{"type", "Split"}, {"pattern", {{"Regex", "["}}}, {"behavior", "Isolated"}}, "x")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunPreTokenizer(
                {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}}, "x")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunPreTokenizer({{"type", "Metaspace"}, {"replacement", "ab"}}, "x").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::tokenizer
