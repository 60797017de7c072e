#include "tokenizer/added_vocabulary.h"

#include <gtest/gtest.h>

namespace kvferry::tokenizer {
namespace {

// "text" pieces as strings, added tokens as "#id".
std::vector<std::string> Split(const AddedVocabulary& v, std::string_view text,
                               bool normalized = false) {
  std::vector<std::string> out;
  for (const auto& p : v.Split(text, normalized)) {
    out.push_back(p.id >= 0 ? "#" + std::to_string(p.id)
                            : std::string(text.substr(p.begin, p.end - p.begin)));
  }
  return out;
}

AddedVocabulary MakeVocabulary(std::vector<AddedToken> tokens, const Normalizer* n = nullptr,
                               bool encode_special = false) {
  StatusOr<AddedVocabulary> v = AddedVocabulary::Create(std::move(tokens), n, encode_special);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(v).value() : AddedVocabulary();
}

using V = std::vector<std::string>;

TEST(AddedVocabularyTest, LeftmostLongest) {
  AddedVocabulary v = MakeVocabulary({{"<|a|>", 10}, {"<|a|><|b|>", 11}, {"<|b|>", 12}});
  EXPECT_EQ(Split(v, "x<|a|><|b|>y<|b|><|a|>"), (V{"x", "#11", "y", "#12", "#10"}));
  EXPECT_EQ(Split(v, "plain"), (V{"plain"}));
  EXPECT_EQ(Split(v, ""), (V{""}));
}

TEST(AddedVocabularyTest, StripFlagsTakeNeighbouringWhitespace) {
  AddedToken l{"<L>", 1};
  l.lstrip = true;
  AddedToken r{"<R>", 2};
  r.rstrip = true;
  AddedVocabulary v = MakeVocabulary({l, r});
  EXPECT_EQ(Split(v, "a  <L> b"), (V{"a", "#1", " b"}));
  EXPECT_EQ(Split(v, "a <R> \t b"), (V{"a ", "#2", "b"}));
}

TEST(AddedVocabularyTest, SingleWordOnlyBetweenNonWordCharacters) {
  AddedToken t{"cat", 5};
  t.single_word = true;
  AddedVocabulary v = MakeVocabulary({t});
  EXPECT_EQ(Split(v, "a cat!"), (V{"a ", "#5", "!"}));
  EXPECT_EQ(Split(v, "concat cats"), (V{"concat cats"}));
}

TEST(AddedVocabularyTest, NormalizedTokensMatchTheirNormalizedForm) {
  auto lower = std::unique_ptr<Normalizer>();
  StatusOr<std::unique_ptr<Normalizer>> n = NormalizerFromJson(
      JsonSection(nlohmann::json{{"type", "Lowercase"}}, "tokenizer.json", "normalizer"));
  ASSERT_TRUE(n.ok());
  AddedToken t{"HELLO", 7};
  t.normalized = true;
  AddedVocabulary v = MakeVocabulary({t}, n->get());
  EXPECT_EQ(Split(v, "say hello", /*normalized=*/true), (V{"say ", "#7"}));
  EXPECT_EQ(Split(v, "say hello", /*normalized=*/false), (V{"say hello"}));  // raw kind: none
}

TEST(AddedVocabularyTest, EncodeSpecialTokensLeavesSpecialsAsText) {
  AddedToken s{"<s>", 1};
  s.special = true;
  AddedToken u{"<u>", 2};
  AddedVocabulary v = MakeVocabulary({s, u}, nullptr, /*encode_special=*/true);
  EXPECT_EQ(Split(v, "<s>x<u>"), (V{"<s>x", "#2"}));
  EXPECT_EQ(v.FindContent("<s>")->id, 1);
  EXPECT_EQ(v.FindId(2)->content, "<u>");
}

}  // namespace
}  // namespace kvferry::tokenizer
