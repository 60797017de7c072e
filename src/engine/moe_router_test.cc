// RouteToken (moe_router.h) on hand-worked logits: softmax and sigmoid scores, the top-k with its
// tie rule, normalisation and scaling, the correction bias steering the choice but not the
// weight, and group-limited routing.
#include "engine/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvferry::engine {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed Route(const MoeShape& m, const std::vector<float>& logits, const std::vector<float>& bias) {
  Routed r{std::vector<int32_t>(m.experts_per_token), std::vector<float>(m.experts_per_token)};
  RouteToken(m, logits.data(), bias, r.experts.data(), r.weights.data());
  return r;
}

TEST(MoeRouterTest, SoftmaxTopKNormalisedAscendingIds) {
  const MoeShape m{.num_experts = 4, .experts_per_token = 2, .expert_ffn_dim = 8};
  const Routed r = Route(m, {0.5f, 2.0f, -1.0f, 1.0f}, {});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  const double e1 = std::exp(2.0), e3 = std::exp(1.0);
  EXPECT_NEAR(r.weights[0], e1 / (e1 + e3), 1e-6);
  EXPECT_NEAR(r.weights[1], e3 / (e1 + e3), 1e-6);
}

TEST(MoeRouterTest, UnnormalisedWeightsAreTheScoresTimesTheScalingFactor) {
  MoeShape m{.num_experts = 3, .experts_per_token = 1, .expert_ffn_dim = 8};
  m.norm_topk_prob = false;
  m.routed_scaling_factor = 2.0f;
  const Routed r = Route(m, {0.0f, 0.0f, std::log(2.0f)}, {});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2}));
  EXPECT_NEAR(r.weights[0], 2.0 * 0.5, 1e-6);  // softmax 2/4, times 2
}

TEST(MoeRouterTest, TiesGoToTheLowerExpertId) {
  const MoeShape m{.num_experts = 4, .experts_per_token = 2, .expert_ffn_dim = 8};
  EXPECT_EQ(Route(m, {1.0f, 3.0f, 3.0f, 3.0f}, {}).experts, (std::vector<int32_t>{1, 2}));
}

TEST(MoeRouterTest, CorrectionBiasChoosesButDoesNotWeigh) {
  MoeShape m{.num_experts = 3, .experts_per_token = 1, .expert_ffn_dim = 8};
  m.scoring = MoeShape::Scoring::kSigmoid;
  m.correction_bias = true;
  m.norm_topk_prob = false;
  const Routed r = Route(m, {1.0f, 0.0f, 0.5f}, {0.0f, 0.9f, 0.0f});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1}));  // 0.5 + 0.9 beats sigmoid(1) = 0.73
  EXPECT_NEAR(r.weights[0], 0.5, 1e-6);             // its sigmoid score, no bias
}

TEST(MoeRouterTest, OnlyTheBestGroupsExpertsAreChosen) {
  // Groups {0,1} {2,3} {4,5} {6,7}; group score = sum of its best two. Group 1 (2+2) and group 3
  // (1.5+1.5) win over group 0, which holds the single best expert (3 + -5).
  MoeShape m{.num_experts = 8, .experts_per_token = 2, .expert_ffn_dim = 8};
  m.num_groups = 4;
  m.topk_groups = 2;
  m.group_score_top = 2;
  m.scoring = MoeShape::Scoring::kSigmoid;
  const std::vector<float> logits = {3.0f, -5.0f, 2.0f, 2.0f, -1.0f, -1.0f, 1.5f, 1.5f};
  EXPECT_EQ(Route(m, logits, {}).experts, (std::vector<int32_t>{2, 3}));
  m.group_score_top = 1;  // V2's rule: a group scores its best expert; group 0 now wins
  EXPECT_EQ(Route(m, logits, {}).experts, (std::vector<int32_t>{0, 2}));
}

}  // namespace
}  // namespace kvferry::engine
