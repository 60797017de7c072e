#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

namespace kvferry::engine {
namespace {

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  const SampleResult r = Sample(logits.data(), 4, p, 0, 0);
  EXPECT_EQ(r.token_id, 1);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-6);
}

TEST(SamplerTest, TopKOneIsGreedyAndTopPSmallIsGreedy) {
  std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.25f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Sample(logits.data(), 4, p, 7, i).token_id, 1);
  p.top_k = 0;
  p.top_p = 1e-6f;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Sample(logits.data(), 4, p, 7, i).token_id, 1);
}

TEST(SamplerTest, SamplesFollowTheDistribution) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[Sample(logits.data(), 3, p, 42, i).token_id];
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
  // top_p 0.75 keeps {0, 1} (mass 0.8 >= 0.75), renormalized.
  p.top_p = 0.75f;
  counts.clear();
  for (int i = 0; i < n; ++i) ++counts[Sample(logits.data(), 3, p, 42, i).token_id];
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / double(n), 0.625, 0.02);
}

TEST(SamplerTest, DeterministicPerSeedAndIndex) {
  std::vector<float> logits(260);
  for (int i = 0; i < 260; ++i) logits[i] = std::sin(i * 0.37f) * 3;
  SamplingParams p;
  p.temperature = 0.8f;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(Sample(logits.data(), 260, p, 5, i).token_id,
              Sample(logits.data(), 260, p, 5, i).token_id);
  }
  EXPECT_NE(SampleUniform(1, 0), SampleUniform(2, 0));
  EXPECT_NE(SampleUniform(1, 0), SampleUniform(1, 1));
  EXPECT_GE(SampleUniform(3, 3), 0.0);
  EXPECT_LT(SampleUniform(3, 3), 1.0);
}

// The candidate order before the partial sort: every id, stable-sorted by logit (ties by id).
std::vector<int32_t> StableOrder(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

// The top_k draw as written over the full stable order (sampler.h's definition).
int32_t ReferenceTopK(const std::vector<float>& logits, int32_t top_k, float temperature,
                      uint64_t seed, int64_t index) {
  const std::vector<int32_t> order = StableOrder(logits);
  const double inv_t = 1.0 / temperature, zmax = logits[order[0]] * inv_t;
  std::vector<double> p(top_k);
  double total = 0;
  for (int32_t i = 0; i < top_k; ++i) total += p[i] = std::exp(logits[order[i]] * inv_t - zmax);
  const double u = SampleUniform(seed, index) * total;
  double cum = 0;
  for (int32_t i = 0; i < top_k; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[top_k - 1];
}

TEST(SamplerTest, PartialOrderEqualsTheFullStableOrderWithTies) {
  // 5000 logits on 40 distinct values: many ties, broken by id.
  std::vector<float> logits(5000);
  for (int i = 0; i < 5000; ++i) logits[i] = static_cast<float>((i * 7919) % 40) * 0.25f;
  const std::vector<int32_t> full = StableOrder(logits);
  SamplingParams p;
  p.top_logprobs = 300;
  const SampleResult r = Sample(logits.data(), 5000, p, 0, 0);
  ASSERT_EQ(r.top_logprobs.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(r.top_logprobs[i].token_id, full[i]) << i;
  p.temperature = 0.7f;
  for (int32_t k : {1, 3, 50, 400}) {
    p.top_k = k;
    for (int i = 0; i < 40; ++i) {
      EXPECT_EQ(Sample(logits.data(), 5000, p, 9, i).token_id, ReferenceTopK(logits, k, 0.7f, 9, i))
          << "top_k " << k << " draw " << i;
    }
  }
}

}  // namespace
}  // namespace kvferry::engine
