// Batch invariance (DESIGN.md §7): the logits of a sequence are bit-identical whatever the
// batch, the chunking, the kernel block size, the layout, the thread count, for each storage
// dtype. Runs the model runner directly so the logits themselves can be compared.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "engine/model_runner.h"
#include "engine/thread_pool.h"
#include "engine/weights.h"
#include "kvferry/engine/tokenizer.h"
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

const ModelWeights& Tiny() {
  static const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny"));
  return w;
}

std::vector<std::vector<int32_t>> Prompts() {
  Tokenizer tok;
  return {tok.Encode("The quick brown fox jumps over the lazy dog, twice or thrice."),
          tok.Encode("Hello"),
          tok.Encode("kvferry moves KV blocks between prefill and decode instances!!")};
}

// Runs `plan` and returns, for every chunk, the logits of its last token keyed by
// (sequence, position).
std::map<std::pair<int, int>, std::vector<float>> RunPlan(const Geometry& g, int threads,
                                                          const Plan& plan) {
  const auto prompts = Prompts();
  const ModelConfig& c = Tiny().config;
  kv::CacheSpec spec;
  spec.num_layers = c.num_layers;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.dtype = g.dtype;
  spec.layout = g.layout;
  spec.block_size_kernel = g.block_size_kernel;
  const int32_t per_seq = (128 + g.block_size_kernel - 1) / g.block_size_kernel;
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
  ModelRunner runner(&Tiny(), cache->get(), 256, &pool);
  std::vector<int> done(prompts.size(), 0);
  std::map<std::pair<int, int>, std::vector<float>> result;
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
Plan Chunked(int chunk) {
  Plan plan;
  std::vector<int> done = {0, 0, 0};
  for (bool more = true; more;) {
    more = false;
    Step step;
    for (int s = 0; s < 3; ++s) {
      const int n = std::min(chunk + s, Len(s) - done[s]);  // different sizes per sequence
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

// Logits at each sequence's last prompt position.
std::vector<std::vector<float>> Finals(const std::map<std::pair<int, int>, std::vector<float>>& m) {
  std::vector<std::vector<float>> out;
  for (int s = 0; s < 3; ++s) out.push_back(m.at({s, Len(s) - 1}));
  return out;
}

void ExpectSame(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                const std::string& what) {
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(a[s].size(), b[s].size());
    EXPECT_EQ(0, std::memcmp(a[s].data(), b[s].data(), a[s].size() * 4))
        << what << ", sequence " << s;
  }
}

class InvarianceTest : public ::testing::TestWithParam<kv::DType> {};

TEST_P(InvarianceTest, LogitsBitIdenticalAcrossBatchChunkingGeometryAndThreads) {
  const kv::DType dtype = GetParam();
  const Geometry base{16, kv::Layout::kNHD, dtype};
  // Baseline: each sequence alone, whole prompt in one pass, one thread.
  std::vector<std::vector<float>> expected;
  for (int s = 0; s < 3; ++s) expected.push_back(RunPlan(base, 1, Alone(s)).at({s, Len(s) - 1}));

  // (a) batched with sequences of other lengths.
  ExpectSame(expected, Finals(RunPlan(base, 1, AllBatched())), "batched");
  // (b) chunked prefill, several chunk sizes, mixed batches.
  for (int chunk : {1, 5, 16, 23}) {
    ExpectSame(expected, Finals(RunPlan(base, 1, Chunked(chunk))),
               "chunk " + std::to_string(chunk));
  }
  // (c) kernel block sizes and layouts, (e) threads: batched and chunked.
  for (int32_t bs : {16, 32, 64, 128}) {
    for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
      for (int threads : {1, 2}) {
        const Geometry g{bs, layout, dtype};
        const std::string what = "bs " + std::to_string(bs) + " layout " +
                                 std::to_string(int(layout)) + " threads " +
                                 std::to_string(threads);
        ExpectSame(expected, Finals(RunPlan(g, threads, AllBatched())), what);
        ExpectSame(expected, Finals(RunPlan(g, threads, Chunked(7))), what + " chunked");
      }
    }
  }
  // (d) token by token: every intermediate position also matches a whole prefill of that prefix.
  const auto by_token = RunPlan(base, 2, Chunked(1));
  ExpectSame(expected, Finals(by_token), "token by token");
  for (int p : {0, 3, 17}) {
    Plan prefix = {{{0, p + 1}}};
    const auto whole = RunPlan(Geometry{64, kv::Layout::kHND, dtype}, 2, prefix);
    EXPECT_EQ(0, std::memcmp(whole.at({0, p}).data(), by_token.at({0, p}).data(),
                             whole.at({0, p}).size() * 4))
        << "prefix " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, InvarianceTest,
                         ::testing::Values(kv::DType::kF32, kv::DType::kF16, kv::DType::kBF16));

TEST(InvarianceTest, DtypesActuallyDiffer) {
  // Guards against a storage path that silently ignores the dtype.
  const Geometry f32{16, kv::Layout::kNHD, kv::DType::kF32};
  const Geometry bf16{16, kv::Layout::kNHD, kv::DType::kBF16};
  const auto a = Finals(RunPlan(f32, 1, AllBatched()));
  const auto b = Finals(RunPlan(bf16, 1, AllBatched()));
  EXPECT_NE(0, std::memcmp(a[0].data(), b[0].data(), a[0].size() * 4));
}

}  // namespace
}  // namespace kvferry::engine
