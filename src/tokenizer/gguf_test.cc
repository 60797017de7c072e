#include <gtest/gtest.h>

#include "kvferry/tokenizer/gguf_metadata.h"
#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/test_fixtures.h"

namespace kvferry::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// The byte-level fixture laid out as Qwen2's tokenizer.json: NFC, then its Split regex.
nlohmann::json QwenLike() {
  nlohmann::json j = testing::ByteLevelJson(testing::kQwen2Regex);
  j["normalizer"] = {{"type", "NFC"}};
  return j;
}

Ids EncodeOk(const Tokenizer& t, std::string_view text, bool special = true) {
  StatusOr<Ids> ids = t.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(GgufTest, ExportThenLoadEncodesAsTheOriginal) {
  for (const nlohmann::json& j : {testing::SentencePieceJson(), QwenLike()}) {
    const bool spm = j["pre_tokenizer"].is_null();
    const std::string config = spm ? testing::SentencePieceConfig().dump() : "";
    StatusOr<Tokenizer> hf = Tokenizer::FromHuggingFaceJson(j.dump(), config);
    ASSERT_TRUE(hf.ok()) << hf.status();
    StatusOr<GgufTokenizerMetadata> meta = ExportGgufMetadata(j.dump(), config);
    ASSERT_TRUE(meta.ok()) << meta.status();
    StatusOr<Tokenizer> gguf = Tokenizer::FromGguf(*meta);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    for (const char* text : {"Hello world!", "hello hi", " \xE4\xB8\xAD x", "<s>Hello</s>",
                             "<|im_start|>hell\n<think>", "cafe\xCC\x81", ""}) {
      EXPECT_EQ(EncodeOk(*gguf, text), EncodeOk(*hf, text)) << text;
      EXPECT_EQ(gguf->Decode(EncodeOk(*gguf, text), false), hf->Decode(EncodeOk(*hf, text), false));
    }
    EXPECT_EQ(gguf->vocab_size(), hf->vocab_size());
    EXPECT_EQ(gguf->bos_token_id(), hf->bos_token_id());
    EXPECT_EQ(gguf->add_bos(), hf->add_bos());
    EXPECT_EQ(gguf->special_token_ids(), hf->special_token_ids());
  }
}

TEST(GgufTest, ExportFields) {
  StatusOr<GgufTokenizerMetadata> spm = ExportGgufMetadata(testing::SentencePieceJson().dump(),
                                                           testing::SentencePieceConfig().dump());
  ASSERT_TRUE(spm.ok()) << spm.status();
  EXPECT_EQ(spm->model, "llama");
  EXPECT_EQ(spm->tokens.size(), 21u);
  EXPECT_EQ(spm->token_types[0], int32_t(GgufTokenType::kUnknown));
  EXPECT_EQ(spm->token_types[1], int32_t(GgufTokenType::kControl));
  EXPECT_EQ(spm->token_types[3], int32_t(GgufTokenType::kByte));
  EXPECT_EQ(spm->token_types[15], int32_t(GgufTokenType::kNormal));
  EXPECT_EQ(spm->merges[1], "l l");
  EXPECT_EQ(spm->scores[15], -4.0f);  // ▁Hello is made by merge 4
  EXPECT_EQ(spm->bos_token_id, 1);
  EXPECT_EQ(spm->eos_token_id, 2);
  EXPECT_EQ(spm->add_bos_token, true);
  EXPECT_EQ(spm->add_eos_token, false);
  EXPECT_EQ(spm->add_space_prefix, true);
  EXPECT_EQ(spm->chat_template, "T");

  StatusOr<GgufTokenizerMetadata> bl = ExportGgufMetadata(QwenLike().dump());
  ASSERT_TRUE(bl.ok()) << bl.status();
  EXPECT_EQ(bl->model, "gpt2");
  EXPECT_EQ(bl->pre, "qwen2");
  EXPECT_EQ(bl->tokens[290], "[PAD290]");
  EXPECT_EQ(bl->token_types[290], int32_t(GgufTokenType::kUnused));
  EXPECT_EQ(bl->token_types[300], int32_t(GgufTokenType::kControl));
  EXPECT_EQ(bl->token_types[301], int32_t(GgufTokenType::kUserDefined));
  EXPECT_TRUE(bl->scores.empty());
}

TEST(GgufTest, ExportRefusesWhatGgufCannotSay) {
  nlohmann::json j = testing::ByteLevelJson(R"(\p{L}+|\p{N}+)");
  StatusOr<GgufTokenizerMetadata> meta = ExportGgufMetadata(j.dump());
  EXPECT_EQ(meta.status().code(), StatusCode::kUnimplemented);
  // Qwen2's regex without Qwen2's NFC: a GGUF "qwen2" would normalize, so it is refused.
  EXPECT_EQ(ExportGgufMetadata(testing::ByteLevelJson(testing::kQwen2Regex).dump()).status().code(),
            StatusCode::kUnimplemented);
  j = testing::SentencePieceJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(ExportGgufMetadata(j.dump()).status().code(), StatusCode::kUnimplemented);
}

GgufTokenizerMetadata TinySentencePiece() {
  GgufTokenizerMetadata m;
  m.model = "llama";
  const std::string s = testing::kMark;
  m.tokens = {"<unk>", "<s>", "</s>", s, "a", "b", s + "a", "ab", s + "ab"};
  m.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  // ▁ab beats ab beats ▁a: merges ▁a+b ... ▁+ab by score.
  m.scores = {0, 0, 0, -100, -100, -100, -3, -1, -2};
  return m;
}

TEST(GgufTest, SentencePieceMergesFromScores) {
  StatusOr<Tokenizer> t = Tokenizer::FromGguf(TinySentencePiece());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(EncodeOk(*t, "ab"), (Ids{1, 8}));        // ▁ a b -> ▁ ab -> ▁ab
  EXPECT_EQ(EncodeOk(*t, "a", false), (Ids{6}));     // ▁ a -> ▁a
  EXPECT_EQ(EncodeOk(*t, "c", false), (Ids{3, 0}));  // no byte tokens: <unk>
  EXPECT_EQ(t->Decode(Ids{1, 8, 6}, true), "ab a");
  EXPECT_EQ(t->bos_token_id(), 1);  // llama.cpp's defaults for SentencePiece
  EXPECT_EQ(t->eos_token_ids(), (Ids{2}));
  EXPECT_TRUE(t->add_bos());
}

TEST(GgufTest, Gpt2PreTypesAndFlags) {
  StatusOr<GgufTokenizerMetadata> meta = ExportGgufMetadata(QwenLike().dump());
  ASSERT_TRUE(meta.ok()) << meta.status();
  // qwen2 normalizes to NFC as Qwen's tokenizer.json does: é decomposed encodes as composed.
  StatusOr<Tokenizer> t = Tokenizer::FromGguf(*meta);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(EncodeOk(*t, "cafe\xCC\x81"), EncodeOk(*t, "caf\xC3\xA9"));
  // llama-bpe adds bos unless add_bos_token says otherwise; eot and eom also end generation.
  meta->pre = "llama-bpe";
  meta->bos_token_id = 300;
  meta->eos_token_id = 301;
  meta->eot_token_id = 300;
  meta->add_bos_token.reset();
  StatusOr<Tokenizer> llama = Tokenizer::FromGguf(*meta);
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_TRUE(llama->add_bos());
  EXPECT_EQ(EncodeOk(*llama, "hi").front(), 300);
  EXPECT_EQ(llama->eos_token_ids(), (Ids{301, 300}));
}

TEST(GgufTest, LoadErrors) {
  GgufTokenizerMetadata m = TinySentencePiece();
  m.model = "bert";
  EXPECT_EQ(Tokenizer::FromGguf(m).status().code(), StatusCode::kUnimplemented);
  m = TinySentencePiece();
  m.model = "gpt2";
  m.pre = "tekken";
  EXPECT_EQ(Tokenizer::FromGguf(m).status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(Tokenizer::FromGguf(m).status().message().find("\"tekken\""), std::string_view::npos);
  m = TinySentencePiece();
  m.tokens[5] = "a";
  EXPECT_NE(Tokenizer::FromGguf(m).status().message().find("duplicate"), std::string_view::npos);
  m = TinySentencePiece();
  m.merges = {"a"};
  EXPECT_EQ(Tokenizer::FromGguf(m).status().code(), StatusCode::kInvalidArgument);
  m = TinySentencePiece();
  m.bos_token_id = 99;
  EXPECT_EQ(Tokenizer::FromGguf(m).status().code(), StatusCode::kInvalidArgument);
  m = TinySentencePiece();
  m.token_types.resize(3);
  EXPECT_EQ(Tokenizer::FromGguf(m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromGguf(GgufTokenizerMetadata{}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::tokenizer
