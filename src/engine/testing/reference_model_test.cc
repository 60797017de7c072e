// The reference model's own contract: causal by construction, LastLogits agrees with Logits,
// bad input and bad weights are errors.
#include "engine/testing/reference_model.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/engine_test_util.h"
#include "engine/weights.h"

namespace kvferry::engine {
namespace {

const ModelWeights& TinyOdd() {
  static const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny-odd"));
  return w;
}

TEST(ReferenceModelTest, EarlierPositionsIgnoreLaterTokens) {
  auto model = ReferenceModel::Create(TinyOdd());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> a =
      testing_util::Encode(tokenizer::Tokenizer::BuiltinByteLevel(), "causal prefix, then A");
  std::vector<int32_t> b = a;
  b.back() = 'B';
  b.push_back('!');
  auto la = model->Logits(a);
  auto lb = model->Logits(b);
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), a.size());
  ASSERT_EQ(lb->size(), b.size());
  for (size_t p = 0; p + 1 < a.size(); ++p) EXPECT_EQ((*la)[p], (*lb)[p]) << "position " << p;
  EXPECT_NE(la->back(), (*lb)[a.size() - 1]);
  auto last = model->LastLogits(b);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, lb->back());
}

TEST(ReferenceModelTest, BadTokensAreErrors) {
  auto model = ReferenceModel::Create(TinyOdd());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->Logits({}).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {1, TinyOdd().config.vocab_size};
  EXPECT_EQ(model->Logits(outside).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(model->LastLogits(negative).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> too_long(TinyOdd().config.max_position + 1, 65);
  EXPECT_EQ(model->LastLogits(too_long).status().code(), StatusCode::kInvalidArgument);
}

TEST(ReferenceModelTest, WrongTensorSizesAreErrors) {
  ModelWeights w = TinyOdd();
  w.layers[1].k.rows -= 1;
  auto model = ReferenceModel::Create(w);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("k of layer 1"), std::string_view::npos)
      << model.status();
  w = TinyOdd();
  w.layers.pop_back();
  EXPECT_EQ(ReferenceModel::Create(w).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::engine
