#include <gtest/gtest.h>

#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// The ids kvferry's built-in models were trained with: <bos>, then one id per byte.
TEST(BuiltinTest, KeepsTheByteIds) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  EXPECT_EQ(*t.Encode("hi", true), (Ids{256, 'h', 'i'}));
  EXPECT_EQ(*t.Encode("hi", false), (Ids{'h', 'i'}));
  EXPECT_EQ(*t.Encode("", true), (Ids{256}));
  EXPECT_EQ(*t.Encode(" a  b\n", false), (Ids{' ', 'a', ' ', ' ', 'b', '\n'}));
  EXPECT_EQ(*t.Encode("\xE4\xB8\xAD", false), (Ids{0xE4, 0xB8, 0xAD}));
  // Any bytes, valid UTF-8 or not; special tokens' names are just bytes.
  EXPECT_EQ(*t.Encode("\xFF\x00x", false), (Ids{0xFF}));  // a C string stops at the NUL
  EXPECT_EQ(*t.Encode(std::string_view("\xFF\x00x", 3), false), (Ids{0xFF, 0, 'x'}));
  EXPECT_EQ(*t.Encode("<bos>", false), (Ids{'<', 'b', 'o', 's', '>'}));
}

TEST(BuiltinTest, DecodesBytesAndSpecials) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  EXPECT_EQ(t.DecodeBytes(Ids{256, 'h', 'i', 257, 258, 259}, true), "hi");
  EXPECT_EQ(t.Decode(Ids{256, 'h', 'i', 257}, false), "<bos>hi<eos>");
  EXPECT_EQ(t.DecodeBytes(Ids{0xE4, 0xB8}, true), "\xE4\xB8");  // raw, as before
  EXPECT_EQ(t.Decode(Ids{0xE4, 0xB8}, true), "\xEF\xBF\xBD");   // made valid UTF-8
  EXPECT_EQ(t.TokenText('A'), "A");
  EXPECT_EQ(t.TokenBytes(0x80), "\x80");
}

TEST(BuiltinTest, Metadata) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  EXPECT_EQ(t.vocab_size(), Tokenizer::kBuiltinVocabSize);
  EXPECT_EQ(t.bos_token_id(), Tokenizer::kBuiltinBos);
  EXPECT_EQ(t.eos_token_ids(), (Ids{Tokenizer::kBuiltinEos}));
  EXPECT_EQ(t.pad_token_id(), Tokenizer::kBuiltinPad);
  EXPECT_EQ(t.unk_token_id(), Tokenizer::kBuiltinUnk);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.special_token_ids(), (Ids{256, 257, 258, 259}));
  EXPECT_EQ(t.special_tokens().bos, "<bos>");
  EXPECT_EQ(t.TokenToId("<eos>"), 257);
}

TEST(BuiltinTest, EveryByteRoundTrips) {
  const Tokenizer t = Tokenizer::BuiltinByteLevel();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  StatusOr<Ids> ids = t.Encode(all, false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ((*ids)[b], b);
  EXPECT_EQ(t.DecodeBytes(*ids, true), all);
}

}  // namespace
}  // namespace kvferry::tokenizer
