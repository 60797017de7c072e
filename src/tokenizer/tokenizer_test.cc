#include "kvferry/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/test_fixtures.h"

namespace kvferry::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
using testing::ByteLevelJson;
using testing::kQwen2Regex;
using testing::SentencePieceConfig;
using testing::SentencePieceJson;

Tokenizer Load(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  StatusOr<Tokenizer> t =
      Tokenizer::FromHuggingFaceJson(j.dump(), config.is_null() ? "" : config.dump());
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return Tokenizer::BuiltinByteLevel();
  }
  return std::move(t).value();
}

Ids Encode(const Tokenizer& t, std::string_view text, bool special = true) {
  StatusOr<Ids> ids = t.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(TokenizerTest, SentencePieceEncodeDecode) {
  const Tokenizer t = Load(SentencePieceJson(), SentencePieceConfig());
  EXPECT_EQ(Encode(t, "Hello world!"), (Ids{1, 15, 19, 10, 17, 9, 18, 20}));
  EXPECT_EQ(Encode(t, "Hello world!", false), (Ids{15, 19, 10, 17, 9, 18, 20}));
  EXPECT_EQ(t.Decode(Encode(t, "Hello world!"), true), "Hello world!");
  EXPECT_EQ(t.Decode(Encode(t, "Hello world!"), false), "<s> Hello world!");
  // 中 is not in the vocabulary: byte fallback; x has no byte token either: <unk>.
  EXPECT_EQ(Encode(t, "\xE4\xB8\xAD x", false), (Ids{6, 3, 4, 5, 6, 0}));
  EXPECT_EQ(t.Decode(Ids{6, 3, 4, 5}, true), "\xE4\xB8\xAD");
  // Special tokens in the text are matched before the normalizer; the piece after gets its ▁.
  EXPECT_EQ(Encode(t, "<s>Hello", false), (Ids{1, 15}));
  EXPECT_EQ(Encode(t, "", true), (Ids{1}));
  EXPECT_EQ(Encode(t, "", false), (Ids{}));
}

TEST(TokenizerTest, SentencePieceTokenText) {
  const Tokenizer t = Load(SentencePieceJson(), SentencePieceConfig());
  EXPECT_EQ(t.TokenBytes(15), " Hello");  // mid-text: the ▁ is a space
  EXPECT_EQ(t.TokenBytes(3), "\xE4");
  EXPECT_EQ(t.TokenText(3), "\xEF\xBF\xBD");
  EXPECT_EQ(t.TokenText(1), "<s>");
  EXPECT_EQ(t.TokenText(999), "");
  EXPECT_EQ(t.IdToToken(15), std::string(testing::kMark) + "Hello");
  EXPECT_EQ(t.TokenToId("<s>"), 1);
  EXPECT_EQ(t.TokenToId("nope"), std::nullopt);
}

TEST(TokenizerTest, ConfigSpecialTokens) {
  const Tokenizer t = Load(SentencePieceJson(), SentencePieceConfig());
  EXPECT_EQ(t.vocab_size(), 21);
  EXPECT_EQ(t.bos_token_id(), 1);
  EXPECT_EQ(t.eos_token_ids(), (Ids{2}));
  EXPECT_EQ(t.unk_token_id(), 0);
  EXPECT_EQ(t.pad_token_id(), std::nullopt);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.special_token_ids(), (Ids{0, 1, 2}));
  EXPECT_TRUE(t.IsSpecial(2));
  EXPECT_FALSE(t.IsSpecial(15));
  EXPECT_EQ(t.special_tokens().eos, "</s>");
  EXPECT_EQ(t.chat_template(), "T");
  // Without a config there are no bos/eos, but the template still adds <s>.
  const Tokenizer bare = Load(SentencePieceJson());
  EXPECT_EQ(bare.bos_token_id(), std::nullopt);
  EXPECT_FALSE(bare.add_bos());
  EXPECT_EQ(Encode(bare, "Hello"), (Ids{1, 15}));
}

TEST(TokenizerTest, ByteLevelEncodeDecode) {
  const Tokenizer t = Load(ByteLevelJson(kQwen2Regex));
  // "hello" -> he + ll -> hell, then o; " hi" -> Ġh + i.
  EXPECT_EQ(Encode(t, "hello hi"), (Ids{258, 'o', 259, 'i'}));
  EXPECT_EQ(Encode(t, "<|im_start|>user\n<think>"), (Ids{300, 'u', 's', 'e', 'r', '\n', 301}));
  for (const char* text : {"hello hi", "<|im_start|>a\n<think>b", "\xE4\xB8\xAD\xF0\x9F\x98\x80",
                           "tabs\t\tand\r\nlines"}) {
    EXPECT_EQ(t.Decode(Encode(t, text), false), text);
  }
  EXPECT_EQ(t.Decode(Ids{300, 'a', 301}, true), "a<think>");  // only specials are skipped
  EXPECT_EQ(t.Decode(Ids{'a', 5000, -1, 'b'}, false), "ab");  // unknown ids are left out
  EXPECT_EQ(t.Decode(Ids{0xE4, 0xB8}, false), "\xEF\xBF\xBD");
  EXPECT_EQ(t.DecodeBytes(Ids{0xE4, 0xB8}, false), "\xE4\xB8");
  EXPECT_EQ(t.vocab_size(), 302);
  EXPECT_EQ(t.IdToToken(290), std::nullopt);  // a hole between the vocab and the added tokens
}

TEST(TokenizerTest, InvalidUtf8TextIsRefused) {
  const Tokenizer t = Load(ByteLevelJson(kQwen2Regex));
  StatusOr<Ids> ids = t.Encode("ok\xFF", true);
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("byte 2"), std::string_view::npos);
}

Status LoadError(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  return Tokenizer::FromHuggingFaceJson(j.dump(), config.is_null() ? "" : config.dump()).status();
}

TEST(TokenizerTest, LoadErrorsNameTheSection) {
  EXPECT_EQ(Tokenizer::FromHuggingFaceJson("{not json").status().message(),
            "tokenizer.json: not a JSON object");
  nlohmann::json j = SentencePieceJson();
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(LoadError(j).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(LoadError(j).message(), "tokenizer.json: model: unsupported model type \"WordPiece\"");
  j = SentencePieceJson();
  j["truncation"] = {{"max_length", 8}};
  EXPECT_EQ(LoadError(j).code(), StatusCode::kUnimplemented);
  j = SentencePieceJson();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_EQ(
      LoadError(j).message(),
      "tokenizer.json: post_processor: unsupported post_processor type \"RobertaProcessing\"");
  j = SentencePieceJson();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<nope>";
  EXPECT_EQ(LoadError(j).code(), StatusCode::kInvalidArgument);
  j = SentencePieceJson();
  j["model"]["merges"].push_back("q z");
  EXPECT_NE(LoadError(j).message().find("merges[6]"), std::string_view::npos);
  j = SentencePieceJson();
  j["model"]["dropout"] = 0.1;
  EXPECT_EQ(LoadError(j).code(), StatusCode::kUnimplemented);
  nlohmann::json config = SentencePieceConfig();
  config["bos_token"] = "<nope>";
  EXPECT_EQ(LoadError(SentencePieceJson(), config).message(),
            "tokenizer_config.json: bos_token: \"<nope>\" is not a token of tokenizer.json");
}

}  // namespace
}  // namespace kvferry::tokenizer
