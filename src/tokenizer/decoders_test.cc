#include "tokenizer/decoders.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::tokenizer {
namespace {

using V = std::vector<std::string>;

V RunDecoder(const nlohmann::json& config, V tokens, bool at_start = true) {
  StatusOr<std::unique_ptr<Decoder>> d =
      DecoderFromJson(JsonSection(config, "tokenizer.json", "decoder"));
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) (*d)->DecodeChain(&tokens, at_start);
  return tokens;
}

const char* const kMark = "\xE2\x96\x81";  // ▁

TEST(DecodersTest, ByteLevelJoinsBytesAndKeepsPlainTextTokens) {
  EXPECT_EQ(RunDecoder({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "\xC4\x8A"}),
            (V{"Hello world\n"}));
  // The two halves of é (C3 A9) as byte-level characters, and an added token in plain text.
  EXPECT_EQ(RunDecoder({{"type", "ByteLevel"}}, {"\xC3\x83", "\xC2\xA9", "<|im_end|>", " x"}),
            (V{"\xC3\xA9<|im_end|> x"}));
}

TEST(DecodersTest, ByteFallbackGroupsByteRuns) {
  EXPECT_EQ(RunDecoder({{"type", "ByteFallback"}},
                       {"<0x61>", "<0xE4>", "<0xB8>", "<0xAD>", "b", "<0xff>"}),
            (V{"a\xE4\xB8\xAD", "b", "\xFF"}));
  EXPECT_EQ(RunDecoder({{"type", "ByteFallback"}}, {"<0x6>", "<0xZZ>"}), (V{"<0x6>", "<0xZZ>"}));
}

TEST(DecodersTest, MetaspaceDropsTheFirstMarkOnlyAtTheStart) {
  const nlohmann::json m = {
      {"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", "always"}};
  EXPECT_EQ(RunDecoder(m, {std::string(kMark) + "Hey", std::string(kMark) + "friend!"}),
            (V{"Hey", " friend!"}));
  EXPECT_EQ(RunDecoder(m, {std::string(kMark) + "Hey"}, /*at_start=*/false), (V{" Hey"}));
  const nlohmann::json never = {
      {"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", "never"}};
  EXPECT_EQ(RunDecoder(never, {std::string(kMark) + "Hey"}), (V{" Hey"}));
}

TEST(DecodersTest, SentencePieceSequence) {
  const nlohmann::json llama = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", kMark}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(RunDecoder(llama, {std::string(kMark) + "Hello", "<0x21>", std::string(kMark) + "x"}),
            (V{"Hello! x"}));
  EXPECT_EQ(RunDecoder(llama, {std::string(kMark) + "Hello"}, /*at_start=*/false), (V{" Hello"}));
}

TEST(DecodersTest, StripAsTokenizersTest) {
  // decoders/strip.rs: Strip('H', 1, 0) on ["Hey", " friend!", "HHH"].
  EXPECT_EQ(RunDecoder({{"type", "Strip"}, {"content", "H"}, {"start", 1}, {"stop", 0}},
                       {"Hey", " friend!", "HHH"}),
            (V{"ey", " friend!", "HH"}));
  EXPECT_EQ(RunDecoder({{"type", "Strip"}, {"content", "y"}, {"start", 0}, {"stop", 1}},
                       {"Hey", " friend!"}),
            (V{"He", " friend!"}));
  EXPECT_EQ(RunDecoder({{"type", "Strip"}, {"content", "x"}, {"start", 5}, {"stop", 5}}, {"xx"}),
            (V{""}));
}

TEST(DecodersTest, UnsupportedAndMalformed) {
  StatusOr<std::unique_ptr<Decoder>> wp = DecoderFromJson(
      JsonSection(nlohmann::json{{"type", "WordPiece"}}, "tokenizer.json", "decoder"));
  EXPECT_EQ(wp.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(wp.status().message().find("\"WordPiece\""), std::string_view::npos);
  const nlohmann::json regex_replace = {
      {"type", "Replace"}, {"pattern", {{"Regex", "a"}}}, {"content", "b"}};
  EXPECT_EQ(
      DecoderFromJson(JsonSection(regex_replace, "tokenizer.json", "decoder")).status().code(),
      StatusCode::kUnimplemented);
  const nlohmann::json bad_strip = {
      {"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
  EXPECT_EQ(DecoderFromJson(JsonSection(bad_strip, "tokenizer.json", "decoder")).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::tokenizer
