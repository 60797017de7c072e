// The engine against an independent float64 forward pass (testing/reference_model.h), which
// shares no kernel, no cache and no reduction order with it: logits of every position within
// kLogitTolerance, and the greedy token equal to the reference's wherever the reference's top
// two logits are further apart than the engine's error could bridge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/model_runner.h"
#include "engine/testing/reference_model.h"
#include "engine/thread_pool.h"
#include "engine/weights.h"
#include "kvferry/engine/engine.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::engine {
namespace {

// Largest |engine - reference| allowed for a logit, relative to the largest |logit| of its row
// (at least 1). The engine computes in f32 (2^-24 = 6e-8 per rounding) through 3-8 layers, dot
// products up to 1408 long and softmaxes over up to 320 positions; measured worst cases over
// every position of the prompts below: tiny 4.2e-6, tiny-odd 4.8e-6, small 8.3e-6 (growing with
// length and depth). 1e-4 leaves 12x headroom for other CPUs' libm (exp, cos), and stays 12x
// under the smallest bug signal tried: attention dropping ONE key (position 150) of a 320-token
// prompt moves the last logits by 1.2e-3 (tiny-odd); a wrong RoPE pairing or skipping the own
// token moves them by 0.2-2. docs/engine.md, "Reference model".
constexpr double kLogitTolerance = 1e-4;

const ModelWeights& Weights(const std::string& model) {
  static std::map<std::string, ModelWeights> cache;
  auto it = cache.find(model);
  if (it == cache.end()) {
    it = cache.emplace(model, *GenerateWeights(*BuiltinModelConfig(model))).first;
  }
  return it->second;
}

std::vector<int32_t> Prompt(const std::string& text) {
  return testing_util::Encode(tokenizer::Tokenizer::BuiltinByteLevel(), text);
}

// The prompts: short, exactly one logical block of 16, and 320 tokens (past kernel blocks of 64
// and 128).
std::vector<std::vector<int32_t>> Prompts() {
  return {Prompt("Hello"), Prompt("Fifteen bytes!!"), Prompt(testing_util::LongText(319))};
}

// The engine's logits through ModelRunner over an f32 cache (kernel blocks of 16, NHD, two
// threads): every position when `token_by_token` (one decode step per position), else the last
// position of one whole-prompt prefill.
std::vector<std::vector<float>> EngineLogits(const ModelWeights& w,
                                             const std::vector<int32_t>& tokens,
                                             bool token_by_token) {
  const ModelConfig& c = w.config;
  const int32_t n = static_cast<int32_t>(tokens.size());
  kv::CacheSpec spec;
  spec.num_layers = c.num_layers;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.kv_cache_head_dim();
  spec.kind = c.is_mla() ? kv::AttentionKind::kMLA : kv::AttentionKind::kStandard;
  spec.dtype = kv::DType::kF32;
  spec.layout = kv::Layout::kNHD;
  spec.block_size_kernel = 16;
  spec.num_blocks_kernel = (n + 15) / 16;
  auto cache = kv::KvCache::Allocate(spec);
  EXPECT_TRUE(cache.ok()) << cache.status();
  std::vector<kv::KernelBlockId> table;
  for (int32_t b = 0; b < spec.num_blocks_kernel; ++b) table.push_back(kv::KernelBlockId(b));
  ThreadPool pool(2);
  ModelRunner runner(&w, cache->get(), n, &pool);
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  const int32_t step = token_by_token ? 1 : n;
  for (int32_t pos = 0; pos < n; pos += step) {
    const ForwardChunk chunk{std::span<const int32_t>(tokens.data() + pos, step), pos, table, true};
    runner.Forward(std::span<const ForwardChunk>(&chunk, 1), &logits);
    rows.push_back(logits);
  }
  return rows;
}

// max(1, max |r|): what the tolerance is relative to.
double Scale(const std::vector<double>& r) {
  double scale = 1.0;
  for (double v : r) scale = std::max(scale, std::abs(v));
  return scale;
}

// max |a - b| over a row, relative to Scale(b).
double RowError(const std::vector<float>& a, const std::vector<double>& b) {
  double err = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return err / Scale(b);
}

double LogSoftmaxAt(const std::vector<double>& r, int32_t id) {
  const double max = *std::max_element(r.begin(), r.end());
  double sum = 0.0;
  for (double v : r) sum += std::exp(v - max);
  return r[id] - max - std::log(sum);
}

struct Top2 {
  int32_t id;
  double margin;  // top-1 minus top-2, relative like RowError
};
Top2 TopTwo(const std::vector<double>& r) {
  const int32_t best = static_cast<int32_t>(std::max_element(r.begin(), r.end()) - r.begin());
  double second = -INFINITY;
  for (size_t i = 0; i < r.size(); ++i) {
    if (static_cast<int32_t>(i) != best) second = std::max(second, r[i]);
  }
  return {best, (r[best] - second) / Scale(r)};
}

int32_t ArgMax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::string ModelName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Every position's logits (token by token) and the last one of a whole-prompt prefill within
// the tolerance, and the greedy token equal to the reference's where the reference decides.
void ExpectMatchesReference(const ModelWeights& w, const std::vector<std::vector<int32_t>>& prompts,
                            const std::string& model) {
  auto reference = ReferenceModel::Create(w);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const std::vector<int32_t>& prompt : prompts) {
    const std::string what = model + ", prompt of " + std::to_string(prompt.size());
    auto expected = reference->Logits(prompt);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const auto decoded = EngineLogits(w, prompt, /*token_by_token=*/true);
    const auto prefilled = EngineLogits(w, prompt, /*token_by_token=*/false);
    ASSERT_EQ(decoded.size(), expected->size());
    double worst = 0.0;
    int checked = 0;
    for (size_t p = 0; p < decoded.size(); ++p) {
      const double err = RowError(decoded[p], (*expected)[p]);
      worst = std::max(worst, err);
      EXPECT_LE(err, kLogitTolerance) << what << ", position " << p;
      // Each of the top two may be off by the tolerance: a margin over twice that decides.
      const Top2 top = TopTwo((*expected)[p]);
      if (top.margin > 2 * kLogitTolerance) {
        ++checked;
        EXPECT_EQ(ArgMax(decoded[p]), top.id) << what << ", position " << p;
      }
    }
    const double last = RowError(prefilled[0], expected->back());
    EXPECT_LE(last, kLogitTolerance) << what << ", whole-prompt prefill";
    // The argmax check must not be vacuous.
    EXPECT_GE(checked, static_cast<int>(decoded.size()) / 2) << what;
    std::printf("%s: max relative logit error %.3g (prefill %.3g), argmax checked at %d/%zu\n",
                what.c_str(), worst, last, checked, decoded.size());
  }
}

class ReferenceLogitsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceLogitsTest, EngineMatchesFloat64ReferenceAtEveryPosition) {
  ExpectMatchesReference(Weights(GetParam()), Prompts(), GetParam());
}

// small (8 layers, width 512) once: its float64 pass over 320 tokens is most of this file's time.
INSTANTIATE_TEST_SUITE_P(Models, ReferenceLogitsTest,
                         ::testing::Values("tiny", "tiny-odd", "small", "tiny-mla"), ModelName);

// The built-ins are untied; the tied lm_head (embed_tokens^T) is the other half of the model
// definition.
TEST(ReferenceTiedTest, TiedEmbeddingsMatchReference) {
  ModelConfig config = *BuiltinModelConfig("tiny-odd");
  config.tie_embeddings = true;
  auto weights = GenerateWeights(config);
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->lm_head.data, weights->embed.data);
  ExpectMatchesReference(*weights, {Prompt("Hello"), Prompt("Fifteen bytes!!")}, "tied tiny-odd");
}

// The architectures of real checkpoints, on random weights of tiny-odd's odd widths: Qwen2's
// q/k/v biases, Qwen3's per-head q/k norms with a head dim that is not width / heads, and the
// rope scalings (linear; Llama 3.1's per-frequency blend, with a short original context so that
// every band of it is used).
TEST(ReferenceArchitecturesTest, Qwen2Qwen3AndRopeScalingMatchReference) {
  const ModelConfig base = *BuiltinModelConfig("tiny-odd");
  std::vector<std::pair<std::string, ModelConfig>> variants;
  ModelConfig qwen2 = base;
  qwen2.architecture = "qwen2";
  qwen2.attention_bias = true;
  variants.emplace_back("qwen2", qwen2);
  ModelConfig qwen3 = base;
  qwen3.architecture = "qwen3";
  qwen3.qk_norm = true;
  qwen3.head_dim = 26;  // 6 heads x 26 != 99
  qwen3.rope_theta = 1000000.0f;
  variants.emplace_back("qwen3", qwen3);
  ModelConfig linear = base;
  linear.rope_scaling.type = RopeScaling::Type::kLinear;
  linear.rope_scaling.factor = 4.0f;
  variants.emplace_back("rope linear", linear);
  ModelConfig llama3 = base;
  llama3.rope_theta = 500000.0f;
  llama3.rope_scaling = {
      RopeScaling::Type::kLlama3, 8.0f, 1.0f, 4.0f, 64, {}, 32.0f, 1.0f, 1.0f, 0.0f};
  variants.emplace_back("rope llama3", llama3);
  for (const auto& [name, config] : variants) {
    auto weights = GenerateWeights(config);
    ASSERT_TRUE(weights.ok()) << weights.status();
    ExpectMatchesReference(*weights, {Prompt("Hello"), Prompt(testing_util::LongText(150))}, name);
  }
}

// Multi-head latent attention beyond tiny-mla: a query without the low-rank path (q_proj), odd
// widths (latent 27, nope 11, rope 6, values 13: dots with SIMD tails, and a cache row of 33),
// and DeepSeek's yarn rope scaling with its softmax mscale (a short original context, so every
// band of the ramp is used).
TEST(ReferenceArchitecturesTest, MlaVariantsMatchReference) {
  const ModelConfig base = *BuiltinModelConfig("tiny-mla");
  std::vector<std::pair<std::string, ModelConfig>> variants;
  ModelConfig no_q_lora = base;
  no_q_lora.mla.q_lora_rank = 0;
  variants.emplace_back("mla without q_lora", no_q_lora);
  ModelConfig odd = base;
  odd.hidden_dim = 99;
  odd.num_heads = 3;
  odd.mla = {.q_lora_rank = 0,
             .kv_lora_rank = 27,
             .qk_nope_head_dim = 11,
             .qk_rope_head_dim = 6,
             .v_head_dim = 13};
  odd.head_dim = 17;
  odd.ffn_dim = 261;
  variants.emplace_back("mla odd widths", odd);
  ModelConfig yarn = base;
  yarn.rope_scaling.type = RopeScaling::Type::kYarn;
  yarn.rope_scaling.factor = 40.0f;
  yarn.rope_scaling.original_max_position = 64;
  yarn.rope_scaling.mscale = 0.707f;
  yarn.rope_scaling.mscale_all_dim = 0.707f;
  variants.emplace_back("mla yarn", yarn);
  for (const auto& [name, config] : variants) {
    auto weights = GenerateWeights(config);
    ASSERT_TRUE(weights.ok()) << weights.status();
    ExpectMatchesReference(*weights, {Prompt("Hello"), Prompt(testing_util::LongText(150))}, name);
  }
}

class ReferenceGenerationTest : public ::testing::TestWithParam<std::string> {};

// Greedy generation through the Engine API (f32 cache, logical blocks of 16) after a 378-token
// prompt, crossing position 384 (a boundary of kernel blocks 16, 32, 64 and 128): every token is
// the reference's argmax where the reference is decisive, and every logprob is the reference's
// log-softmax within twice the logit tolerance (the logit and the normaliser may each be off).
TEST_P(ReferenceGenerationTest, EngineGreedyTokensAndLogprobsFollowReference) {
  const ModelWeights& w = Weights(GetParam());
  auto reference = ReferenceModel::Create(w);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EngineConfig config;
  config.model = GetParam();
  auto engine = Engine::Create(config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = Prompt(testing_util::LongText(377));
  SamplingParams greedy;
  greedy.max_tokens = 12;
  greedy.ignore_eos = true;
  ASSERT_TRUE((*engine)->AddRequest("r", prompt, greedy).ok());
  const testing_util::Completion out = testing_util::RunToEnd(**engine)["r"];
  ASSERT_EQ(out.tokens.size(), 12u);

  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), out.tokens.begin(), out.tokens.end() - 1);
  auto expected = reference->Logits(sequence);
  ASSERT_TRUE(expected.ok()) << expected.status();
  int checked = 0;
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const std::vector<double>& r = (*expected)[prompt.size() - 1 + i];
    const Top2 top = TopTwo(r);
    if (top.margin > 2 * kLogitTolerance) {
      ++checked;
      EXPECT_EQ(out.tokens[i], top.id) << GetParam() << ", generated token " << i;
    }
    EXPECT_NEAR(out.logprobs[i], LogSoftmaxAt(r, out.tokens[i]), 2 * kLogitTolerance * Scale(r))
        << GetParam() << ", generated token " << i;
  }
  EXPECT_GE(checked, 6) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceGenerationTest,
                         ::testing::Values("tiny", "tiny-odd", "tiny-mla"), ModelName);

}  // namespace
}  // namespace kvferry::engine
