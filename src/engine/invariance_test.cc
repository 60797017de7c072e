// Batch invariance (docs/engine.md, "The determinism contract"): the logits of a sequence are
// bit-identical whatever the batch, the chunking, the kernel block size, the layout, the thread
// count, for each storage dtype and for each of tiny, tiny-odd (whose widths leave SIMD
// tails), tiny-mla (multi-head latent attention over a cache of latent rows), and the mixtures of
// experts tiny-moe and tiny-mla-moe (a token's experts and their sum must not depend on its
// batch). Runs the model
// runner directly so the logits themselves can be compared. One sequence is 392 tokens long, so
// kernel blocks of 64 and 128 are crossed by prefill and by decode steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/model_runner.h"
#include "engine/thread_pool.h"
#include "engine/weights.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::engine {
namespace {

struct Geometry {
  int32_t block_size_kernel;
  kv::Layout layout;
  kv::DType dtype;
};

// One step: (sequence index, number of new tokens) per chunk.
using Step = std::vector<std::pair<int, int>>;
using Plan = std::vector<Step>;
// Logits of the last token of every chunk a plan ran, keyed by (sequence, position).
using PlanLogits = std::map<std::pair<int, int>, std::vector<float>>;

const ModelWeights& Weights(const std::string& model) {
  static std::map<std::string, ModelWeights> cache;
  auto it = cache.find(model);
  if (it == cache.end()) {
    it = cache.emplace(model, *GenerateWeights(*BuiltinModelConfig(model))).first;
  }
  return it->second;
}

// Sequence 0 is 392 tokens: decode steps from position 380 cross 384, a boundary of every
// kernel block size (16, 32, 64, 128).
constexpr int kLongest = 392;
constexpr int kDecodeSteps = 12;

const std::vector<std::vector<int32_t>>& Prompts() {
  static const std::vector<std::vector<int32_t>> prompts = [] {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::BuiltinByteLevel();
    return std::vector<std::vector<int32_t>>{
        testing_util::Encode(tok, testing_util::LongText(kLongest - 1)),
        testing_util::Encode(tok, "Hello"),
        testing_util::Encode(tok,
                             "kvferry moves KV blocks between prefill and decode instances!!")};
  }();
  return prompts;
}

// Runs `plan` on `model` and returns the logits of every chunk's last token.
PlanLogits RunPlan(const std::string& model, const Geometry& g, int threads, const Plan& plan) {
  const auto& prompts = Prompts();
  const ModelWeights& w = Weights(model);
  const ModelConfig& c = w.config;
  kv::CacheSpec spec;
  spec.num_layers = c.num_layers;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.kv_cache_head_dim();
  spec.kind = c.is_mla() ? kv::AttentionKind::kMLA : kv::AttentionKind::kStandard;
  spec.dtype = g.dtype;
  spec.layout = g.layout;
  spec.block_size_kernel = g.block_size_kernel;
  const int32_t per_seq = (kLongest + g.block_size_kernel - 1) / g.block_size_kernel;
  spec.num_blocks_kernel = per_seq * static_cast<int32_t>(prompts.size()) + 3;
  auto cache = kv::KvCache::Allocate(spec);
  EXPECT_TRUE(cache.ok()) << cache.status();
  // Tables interleave the sequences' blocks and run backwards, so no kernel reads by accident
  // what a contiguous layout would give it.
  std::vector<std::vector<kv::KernelBlockId>> tables(prompts.size());
  for (int32_t b = 0; b < per_seq; ++b) {
    for (size_t s = 0; s < prompts.size(); ++s) {
      tables[s].push_back(kv::KernelBlockId(spec.num_blocks_kernel - 1 -
                                            (b * static_cast<int32_t>(prompts.size()) + s)));
    }
  }
  ThreadPool pool(threads);
  ModelRunner runner(&w, cache->get(), kLongest, &pool);
  std::vector<int> done(prompts.size(), 0);
  PlanLogits result;
  std::vector<float> logits;
  for (const Step& step : plan) {
    std::vector<ForwardChunk> chunks;
    for (auto [s, n] : step) {
      ForwardChunk ch;
      ch.tokens = std::span<const int32_t>(prompts[s].data() + done[s], n);
      ch.first_pos = done[s];
      ch.kernel_table = tables[s];
      ch.want_logits = true;
      chunks.push_back(ch);
    }
    runner.Forward(chunks, &logits);
    const int32_t v = c.vocab_size;
    for (size_t i = 0; i < step.size(); ++i) {
      auto [s, n] = step[i];
      done[s] += n;
      result[{s, done[s] - 1}] =
          std::vector<float>(logits.begin() + i * v, logits.begin() + (i + 1) * v);
    }
  }
  return result;
}

int Len(int s) { return static_cast<int>(Prompts()[s].size()); }

Plan Alone(int s) { return {{{s, Len(s)}}}; }
Plan AllBatched() { return {{{0, Len(0)}, {1, Len(1)}, {2, Len(2)}}}; }
// Chunks of `chunk` tokens, plus `spread` more per sequence index (chunk sizes differ between
// the sequences of a batch unless spread is 0).
Plan Chunked(int chunk, int spread = 1) {
  Plan plan;
  std::vector<int> done = {0, 0, 0};
  for (bool more = true; more;) {
    more = false;
    Step step;
    for (int s = 0; s < 3; ++s) {
      const int n = std::min(chunk + spread * s, Len(s) - done[s]);
      if (n > 0) {
        step.push_back({s, n});
        done[s] += n;
        more = true;
      }
    }
    if (!step.empty()) plan.push_back(step);
  }
  return plan;
}

// All sequences prefilled together but for their last kDecodeSteps tokens (at least one token
// each), then batched steps of one token per sequence, as decoding runs: sequence 0 decodes
// positions 380..391, across 384; sequence 2 decodes 51..62.
Plan PrefillThenDecode() {
  Plan plan(1);
  std::vector<int> left(3);
  for (int s = 0; s < 3; ++s) {
    const int prefill = std::max(1, Len(s) - kDecodeSteps);
    plan[0].push_back({s, prefill});
    left[s] = Len(s) - prefill;
  }
  for (int i = 0; i < kDecodeSteps; ++i) {
    Step step;
    for (int s = 0; s < 3; ++s) {
      if (left[s]-- > 0) step.push_back({s, 1});
    }
    plan.push_back(step);
  }
  return plan;
}

// Wherever `got` has logits, they are bit for bit those of `expected` at the same position.
void ExpectSame(const PlanLogits& expected, const PlanLogits& got, const std::string& what) {
  ASSERT_FALSE(got.empty()) << what;
  for (const auto& [key, row] : got) {
    const std::vector<float>& want = expected.at(key);
    ASSERT_EQ(want.size(), row.size()) << what;
    EXPECT_EQ(0, std::memcmp(want.data(), row.data(), row.size() * 4))
        << what << ", sequence " << key.first << ", position " << key.second;
  }
}

std::string Describe(const Geometry& g, int threads) {
  return "kernel block " + std::to_string(g.block_size_kernel) + " " +
         std::string(kv::LayoutName(g.layout)) + " threads " + std::to_string(threads);
}

class InvarianceTest : public ::testing::TestWithParam<std::tuple<std::string, kv::DType>> {};

TEST_P(InvarianceTest, LogitsBitIdenticalAcrossBatchChunkingGeometryAndThreads) {
  const auto& [model, dtype] = GetParam();
  const Geometry base{16, kv::Layout::kNHD, dtype};
  // Baseline: token by token, which gives the logits of every position.
  const PlanLogits expected = RunPlan(model, base, 1, Chunked(1, /*spread=*/0));

  // (a) each sequence alone and whole, and batched with sequences of other lengths.
  for (int s = 0; s < 3; ++s) ExpectSame(expected, RunPlan(model, base, 1, Alone(s)), "alone");
  ExpectSame(expected, RunPlan(model, base, 1, AllBatched()), "batched");
  // (b) chunked prefill, several chunk sizes, mixed batches.
  for (int chunk : {1, 5, 16, 23}) {
    ExpectSame(expected, RunPlan(model, base, 1, Chunked(chunk)), "chunk " + std::to_string(chunk));
  }
  // (c) kernel block sizes and layouts, (e) threads: batched prefill, chunked prefill, and
  // decode steps across a kernel block boundary.
  for (int32_t bs : {16, 32, 64, 128}) {
    for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
      for (int threads : {1, 2}) {
        const Geometry g{bs, layout, dtype};
        const std::string what = Describe(g, threads);
        ExpectSame(expected, RunPlan(model, g, threads, AllBatched()), what);
        ExpectSame(expected, RunPlan(model, g, threads, Chunked(7)), what + " chunked");
        ExpectSame(expected, RunPlan(model, g, threads, PrefillThenDecode()), what + " decode");
      }
    }
  }
  // (d) a whole prefill of a prefix ending on either side of kernel block boundaries equals the
  // token-by-token logits at that position.
  for (int p : {0, 3, 17, 63, 64, 127, 128, 300}) {
    const Plan prefix = {{{0, p + 1}}};
    ExpectSame(expected, RunPlan(model, Geometry{64, kv::Layout::kHND, dtype}, 2, prefix),
               "prefix " + std::to_string(p));
  }
}

INSTANTIATE_TEST_SUITE_P(ModelsAndDtypes, InvarianceTest,
                         ::testing::Combine(::testing::Values("tiny", "tiny-odd", "tiny-mla",
                                                              "tiny-moe", "tiny-mla-moe"),
                                            ::testing::Values(kv::DType::kF32, kv::DType::kF16,
                                                              kv::DType::kBF16)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" +
                                              std::string(kv::DTypeName(std::get<1>(info.param)));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(InvarianceTest, DtypesActuallyDiffer) {
  // Guards against a storage path that silently ignores the dtype.
  const Geometry f32{16, kv::Layout::kNHD, kv::DType::kF32};
  const Geometry bf16{16, kv::Layout::kNHD, kv::DType::kBF16};
  const PlanLogits a = RunPlan("tiny", f32, 1, AllBatched());
  const PlanLogits b = RunPlan("tiny", bf16, 1, AllBatched());
  EXPECT_NE(0, std::memcmp(a.at({0, Len(0) - 1}).data(), b.at({0, Len(0) - 1}).data(),
                           a.at({0, Len(0) - 1}).size() * 4));
}

}  // namespace
}  // namespace kvferry::engine
