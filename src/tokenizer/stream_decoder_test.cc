#include "kvferry/tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "tokenizer/test_fixtures.h"

namespace kvferry::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::vector<std::string> Chunks(const Tokenizer& t, const Ids& ids, bool skip) {
  StreamDecoder s(&t, skip);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(s.Add(id));
  out.push_back(s.Finish());
  return out;
}

using V = std::vector<std::string>;

TEST(StreamDecoderTest, HoldsBytesUntilTheCharacterCompletes) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  // a, then 中 (E4 B8 AD) byte by byte, then 😀 (F0 9F 98 80).
  EXPECT_EQ(Chunks(t, {'a', 0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0x98, 0x80}, true),
            (V{"a", "", "", "\xE4\xB8\xAD", "", "", "", "\xF0\x9F\x98\x80", ""}));
}

TEST(StreamDecoderTest, UnfinishedAndInvalidBytes) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  // A lead byte never completed: held, then U+FFFD at the end, as Decode gives.
  EXPECT_EQ(Chunks(t, {'a', 0xE4, 0xB8}, true), (V{"a", "", "", "\xEF\xBF\xBD"}));
  // A lead byte followed by a non-continuation: both out at once, as Decode gives.
  EXPECT_EQ(Chunks(t, {0xE4, 'b'}, true), (V{"",
                                             "\xEF\xBF\xBD"
                                             "b",
                                             ""}));
  EXPECT_EQ(Chunks(t, {0x80, 'b'}, true), (V{"\xEF\xBF\xBD", "b", ""}));
}

TEST(StreamDecoderTest, SentencePieceSpacesAndByteFallback) {
  StatusOr<Tokenizer> t = Tokenizer::FromHuggingFaceJson(testing::SentencePieceJson().dump());
  ASSERT_TRUE(t.ok()) << t.status();
  // ▁Hello ▁w o r l d ! : only the text's first ▁ is dropped.
  EXPECT_EQ(Chunks(*t, {15, 19, 10, 17, 9, 18, 20}, true),
            (V{"Hello", " w", "o", "r", "l", "d", "!", ""}));
  // <s> skipped; ▁ then 中 as three byte-fallback tokens.
  EXPECT_EQ(Chunks(*t, {1, 15, 6, 3, 4, 5}, true),
            (V{"", "Hello", " ", "", "", "\xE4\xB8\xAD", ""}));
  EXPECT_EQ(Chunks(*t, {1, 15}, false), (V{"<s>", " Hello", ""}));
}

TEST(StreamDecoderTest, ConcatenationEqualsDecode) {
  StatusOr<Tokenizer> t = Tokenizer::FromHuggingFaceJson(testing::SentencePieceJson().dump());
  ASSERT_TRUE(t.ok());
  // Every sequence of up to 4 ids from a mix of pieces, bytes, specials and unknown ids.
  const Ids alphabet = {1, 2, 3, 4, 5, 6, 15, 19, 20, 99};
  std::vector<Ids> seqs = {{}};
  for (int len = 1; len <= 4; ++len) {
    std::vector<Ids> next;
    for (const Ids& s : seqs) {
      for (int32_t id : alphabet) {
        Ids longer = s;
        longer.push_back(id);
        for (bool skip : {false, true}) {
          std::string joined;
          for (const std::string& c : Chunks(*t, longer, skip)) joined += c;
          ASSERT_EQ(joined, t->Decode(longer, skip));
        }
        next.push_back(std::move(longer));
      }
    }
    seqs = std::move(next);
  }
}

}  // namespace
}  // namespace kvferry::tokenizer
