#include "engine/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kvferry::engine {
namespace {

// Softmax or sigmoid of the logits.
void Scores(const MoeShape& m, const float* logits, float* scores) {
  const int32_t n = m.num_experts;
  if (m.scoring == MoeShape::Scoring::kSigmoid) {
    for (int32_t e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return;
  }
  float max = logits[0];
  for (int32_t e = 1; e < n; ++e) max = std::max(max, logits[e]);
  float sum = 0.0f;
  for (int32_t e = 0; e < n; ++e) {
    scores[e] = std::exp(logits[e] - max);
    sum += scores[e];
  }
  for (int32_t e = 0; e < n; ++e) scores[e] /= sum;
}

// Ids [0, n) ordered by value descending, ties by the lower id; the first k of them.
void TopK(const float* value, int32_t n, int32_t k, int32_t* out) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [value](int32_t a, int32_t b) {
    return value[a] > value[b] || (value[a] == value[b] && a < b);
  });
  std::copy(ids.begin(), ids.begin() + k, out);
}

// Group-limited routing: the choice values of experts outside the topk_groups best groups
// become -inf. A group's score is the sum of its group_score_top best values.
void MaskGroups(const MoeShape& m, float* choice) {
  const int32_t per = m.num_experts / m.num_groups;
  std::vector<float> group_score(static_cast<size_t>(m.num_groups));
  std::vector<int32_t> best(static_cast<size_t>(std::max(per, m.num_groups)));
  for (int32_t g = 0; g < m.num_groups; ++g) {
    TopK(choice + g * per, per, m.group_score_top, best.data());
    float sum = 0.0f;
    for (int32_t i = 0; i < m.group_score_top; ++i) sum += choice[g * per + best[i]];
    group_score[g] = sum;
  }
  TopK(group_score.data(), m.num_groups, m.topk_groups, best.data());
  std::vector<bool> keep(static_cast<size_t>(m.num_groups), false);
  for (int32_t i = 0; i < m.topk_groups; ++i) keep[best[i]] = true;
  for (int32_t e = 0; e < m.num_experts; ++e) {
    if (!keep[e / per]) choice[e] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

void RouteToken(const MoeShape& m, const float* logits, std::span<const float> bias,
                int32_t* experts, float* weights) {
  const int32_t n = m.num_experts, k = m.experts_per_token;
  std::vector<float> scores(static_cast<size_t>(n)), choice(static_cast<size_t>(n));
  Scores(m, logits, scores.data());
  for (int32_t e = 0; e < n; ++e) choice[e] = scores[e] + (bias.empty() ? 0.0f : bias[e]);
  if (m.num_groups > 1) MaskGroups(m, choice.data());
  TopK(choice.data(), n, k, experts);
  std::sort(experts, experts + k);
  float sum = 0.0f;
  for (int32_t i = 0; i < k; ++i) sum += scores[experts[i]];
  for (int32_t i = 0; i < k; ++i) {
    const float w = m.norm_topk_prob ? scores[experts[i]] / sum : scores[experts[i]];
    weights[i] = w * m.routed_scaling_factor;
  }
}

}  // namespace kvferry::engine
