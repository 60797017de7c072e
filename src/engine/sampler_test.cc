#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

}  // namespace
}  // namespace kvferry::engine
