#include "tokenizer/bpe_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace kvferry::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<BpeModel> Make(Vocab vocab, Merges merges, BpeOptions options = {}) {
  StatusOr<std::unique_ptr<BpeModel>> m =
      BpeModel::Create(std::move(vocab), merges, std::move(options), "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

Ids Tokenize(const BpeModel& m, std::string_view word) {
  Ids ids;
  Status s = m.Tokenize(word, &ids);
  EXPECT_TRUE(s.ok()) << s;
  return ids;
}

TEST(BpeModelTest, LowestRankFirstThenLeftmost) {
  auto m = Make({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"aa", 5}},
                {{"b", "c"}, {"a", "b"}, {"a", "a"}});
  EXPECT_EQ(Tokenize(*m, "abc"), (Ids{0, 4}));  // b+c has rank 0, so a+b never happens
  EXPECT_EQ(Tokenize(*m, "ab"), (Ids{3}));
  EXPECT_EQ(Tokenize(*m, "aaa"), (Ids{5, 0}));  // equal ranks: the leftmost pair first
  EXPECT_EQ(Tokenize(*m, "aaa"), (Ids{5, 0}));  // again, from the cache
}

TEST(BpeModelTest, MergesChainIntoLongerTokens) {
  auto m = Make({{"l", 0},
                 {"o", 1},
                 {"w", 2},
                 {"lo", 3},
                 {"low", 4},
                 {"e", 5},
                 {"r", 6},
                 {"er", 7},
                 {"lower", 8}},
                {{"l", "o"}, {"lo", "w"}, {"e", "r"}, {"low", "er"}});
  EXPECT_EQ(Tokenize(*m, "lower"), (Ids{8}));
  EXPECT_EQ(Tokenize(*m, "lowlow"), (Ids{4, 4}));
}

TEST(BpeModelTest, ByteFallbackUnknownAndFuse) {
  Vocab vocab{{"<unk>", 0}, {"a", 1}, {"<0xE4>", 2}, {"<0xB8>", 3}, {"<0xAD>", 4}};
  BpeOptions fallback;
  fallback.byte_fallback = true;
  fallback.unk_token = "<unk>";
  auto m = Make(vocab, {}, fallback);
  EXPECT_EQ(Tokenize(*m, "a\xE4\xB8\xAD"), (Ids{1, 2, 3, 4}));  // 中 as three bytes
  EXPECT_EQ(Tokenize(*m, "a\xC3\xA9"), (Ids{1, 0}));            // é: bytes missing, so unknown

  BpeOptions unk;
  unk.unk_token = "<unk>";
  EXPECT_EQ(Tokenize(*Make(vocab, {}, unk), "xya"), (Ids{0, 0, 1}));
  unk.fuse_unk = true;
  EXPECT_EQ(Tokenize(*Make(vocab, {}, unk), "xya"), (Ids{0, 1}));
  // Without an unknown token an unknown character is dropped, as in tokenizers.
  EXPECT_EQ(Tokenize(*Make(vocab, {}), "xa"), (Ids{1}));
}

TEST(BpeModelTest, UnknownTokenMissingFromVocabIsAnError) {
  BpeOptions o;
  o.unk_token = "<nope>";
  auto m = Make({{"a", 0}}, {}, o);
  Ids ids;
  EXPECT_EQ(m->Tokenize("b", &ids).code(), StatusCode::kInvalidArgument);
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  Vocab vocab{{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}};
  EXPECT_EQ(Tokenize(*Make(vocab, {}), "abc"), (Ids{0, 1, 2}));
  BpeOptions o;
  o.ignore_merges = true;
  EXPECT_EQ(Tokenize(*Make(vocab, {}, o), "abc"), (Ids{3}));
}

TEST(BpeModelTest, SubwordPrefixAndSuffix) {
  BpeOptions o;
  o.continuing_subword_prefix = "##";
  auto m = Make({{"a", 0}, {"##b", 1}, {"ab", 2}}, {{"a", "##b"}}, o);
  EXPECT_EQ(Tokenize(*m, "ab"), (Ids{2}));
  BpeOptions s;
  s.end_of_word_suffix = "</w>";
  auto n = Make({{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}}, {{"a", "b</w>"}}, s);
  EXPECT_EQ(Tokenize(*n, "ab"), (Ids{2}));
}

TEST(BpeModelTest, BadVocabOrMergesAreErrors) {
  StatusOr<std::unique_ptr<BpeModel>> missing =
      BpeModel::Create({{"a", 0}, {"b", 1}}, {{"a", "b"}}, {}, "tokenizer.json: model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("merges[0]"), std::string_view::npos);
  StatusOr<std::unique_ptr<BpeModel>> sparse =
      BpeModel::Create({{"a", 0}, {"b", 1 << 30}}, {}, {}, "test");
  EXPECT_EQ(sparse.status().code(), StatusCode::kInvalidArgument);
}

// Merging is O(n log n): a 200 KB word of one repeated pair must not take quadratic time.
TEST(BpeModelTest, LongWordIsFast) {
  auto m = Make({{"a", 0}, {"b", 1}, {"ab", 2}, {"abab", 3}}, {{"a", "b"}, {"ab", "ab"}});
  std::string word;
  for (int i = 0; i < 100000; ++i) word += "ab";
  const auto start = std::chrono::steady_clock::now();
  Ids ids = Tokenize(*m, word);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ids, Ids(50000, 3));
  EXPECT_LT(s, 2.0);
}

}  // namespace
}  // namespace kvferry::tokenizer
