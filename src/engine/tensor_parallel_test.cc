// Tensor parallelism: the row-parallel tree, the all-reduce's order, the shard plan, and the
// invariance the rest of kvferry relies on — tokens, logprobs and logits bit-identical at TP 1,
// 2 and 4 (docs/engine.md, "Tensor parallelism").
#include "engine/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/row_parallel.h"
#include "engine/model_runner.h"
#include "engine/thread_pool.h"
#include "engine/tp_communicator.h"

namespace kvferry::engine {
namespace {

using testing_util::Completion;
using testing_util::RunToEnd;

using testing_util::RandomFloats;

TEST(TreeSumTest, FixedPairwiseOrder) {
  // (a + b) + (c + d) = 0 in float, a sequential sum gives 1.
  const float a[] = {1e8f}, b[] = {1.0f}, c[] = {-1e8f}, d[] = {1.0f};
  const float* parts[] = {a, b, c, d};
  float out = -1;
  kernels::TreeSum(parts, 1, &out);
  EXPECT_EQ(out, 0.0f);
  EXPECT_EQ(((a[0] + b[0]) + c[0]) + d[0], 1.0f);
  const float* two[] = {a, b};
  kernels::TreeSum(two, 1, &out);
  EXPECT_EQ(out, a[0] + b[0]);
}

// The model's tree over 4 leaves equals, bit for bit, two ranks' subtrees added, and four
// ranks' leaves combined pairwise — and each leaf is the plain MatMul of its column slice.
TEST(RowParallelMatMulTest, SubtreesRecombineExactly) {
  ThreadPool pool(2);
  for (int64_t M : {1, 3, 20}) {
    for (int64_t K : {96, 132, 261}) {
      const int64_t N = 37;
      const auto x = RandomFloats(M * K, 1);
      const auto wv = RandomFloats(N * K, 2);
      const WeightMatrix w = F32Matrix(wv.data(), N, K);
      const std::vector<int64_t> b4 = {0, K / 4, K / 2, 3 * K / 4, K};
      std::vector<float> whole(M * N), scratch;
      kernels::RowParallelMatMul(x.data(), M, b4, w, whole.data(), &scratch, &pool);

      std::vector<std::vector<float>> leaf(4, std::vector<float>(M * N));
      for (int g = 0; g < 4; ++g) {
        const int64_t kb = b4[g + 1] - b4[g];
        const WeightMatrix slice = ColumnSlice(w, b4[g], kb);
        kernels::MatMulStrided(x.data() + b4[g], M, kb, K, {&slice, 1}, leaf[g].data(), N, nullptr);
      }
      // Two ranks: each the tree of its two leaves over its own columns, then added.
      std::vector<std::vector<float>> half(2, std::vector<float>(M * N));
      for (int r = 0; r < 2; ++r) {
        const int64_t c0 = b4[2 * r], c1 = b4[2 * r + 2];
        std::vector<float> xs(M * (c1 - c0));
        for (int64_t m = 0; m < M; ++m) {
          std::memcpy(&xs[m * (c1 - c0)], &x[m * K + c0], (c1 - c0) * 4);
        }
        const std::vector<int64_t> local = {0, b4[2 * r + 1] - c0, c1 - c0};
        kernels::RowParallelMatMul(xs.data(), M, local, ColumnSlice(w, c0, c1 - c0), half[r].data(),
                                   &scratch, nullptr);
      }
      for (int64_t i = 0; i < M * N; ++i) {
        const float four = (leaf[0][i] + leaf[1][i]) + (leaf[2][i] + leaf[3][i]);
        ASSERT_EQ(std::memcmp(&whole[i], &four, 4), 0) << M << " " << K << " " << i;
        const float two = half[0][i] + half[1][i];
        ASSERT_EQ(std::memcmp(&whole[i], &two, 4), 0) << M << " " << K << " " << i;
      }
    }
  }
}

// Every rank ends with the same bits, the pairwise tree of the ranks' partials (not the
// arrival order), over many rounds in which ranks race ahead of each other.
TEST(TpCommunicatorTest, AllReduceIsTheTreeOnEveryRank) {
  for (int32_t tp : {1, 2, 4}) {
    TpCommunicator comm(tp);
    ThreadPool threads(tp);
    const int64_t n = 333;
    const int rounds = 200;
    std::vector<std::vector<float>> acc(tp, std::vector<float>(n, 0.5f));
    threads.RunOnEach([&](int32_t r) {
      for (int round = 0; round < rounds; ++round) {
        float* p = comm.PartialBuffer(r, n);
        const auto v = RandomFloats(n, 1000 * round + r);
        std::copy(v.begin(), v.end(), p);
        if (r == round % tp) std::this_thread::yield();  // someone is late each round
        comm.AllReduceAdd(r, n, acc[r].data());
      }
    });
    std::vector<float> want(n, 0.5f);
    for (int round = 0; round < rounds; ++round) {
      std::vector<std::vector<float>> parts;
      for (int32_t r = 0; r < tp; ++r) parts.push_back(RandomFloats(n, 1000 * round + r));
      for (int64_t i = 0; i < n; ++i) {
        float s = parts[0][i];
        if (tp == 2) s = parts[0][i] + parts[1][i];
        if (tp == 4) s = (parts[0][i] + parts[1][i]) + (parts[2][i] + parts[3][i]);
        want[i] += s;
      }
    }
    for (int32_t r = 0; r < tp; ++r) {
      EXPECT_EQ(0, std::memcmp(acc[r].data(), want.data(), n * 4)) << "tp " << tp << " rank " << r;
    }
  }
}

TEST(TensorParallelPlanTest, ShardsAndRefusals) {
  const ModelConfig tiny = BuiltinModelConfig("tiny").value();  // 4 heads / 2 KV, ffn 384
  EXPECT_EQ(RowParallelGroups(tiny), 4);
  const auto two = PlanTensorParallel(tiny, 2).value();
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].q_head_first, 2);
  EXPECT_EQ(two[1].num_q_heads, 2);
  EXPECT_EQ(two[1].kv_head_first, 1);
  EXPECT_EQ(two[1].num_kv_heads, 1);
  EXPECT_EQ(two[1].ffn_first, 192);
  EXPECT_EQ(two[1].o_bounds, (std::vector<int64_t>{0, 32, 64}));
  EXPECT_EQ(two[1].down_bounds, (std::vector<int64_t>{0, 96, 192}));
  EXPECT_EQ(two[0].vocab_count + two[1].vocab_count, tiny.vocab_size);
  const auto four = PlanTensorParallel(tiny, 4).value();  // KV heads replicated
  EXPECT_EQ(four[3].kv_head_first, 1);
  EXPECT_EQ(four[2].kv_head_first, 1);
  EXPECT_EQ(four[1].kv_head_first, 0);
  EXPECT_EQ(four[3].o_bounds, (std::vector<int64_t>{0, 32}));
  const auto one = PlanTensorParallel(tiny, 1).value();
  EXPECT_EQ(one[0].o_bounds, (std::vector<int64_t>{0, 32, 64, 96, 128}));

  const ModelConfig odd = BuiltinModelConfig("tiny-odd").value();  // 6 heads, ffn 261
  EXPECT_EQ(RowParallelGroups(odd), 2);
  EXPECT_EQ(PlanTensorParallel(odd, 2).value()[1].down_bounds, (std::vector<int64_t>{0, 131}));
  const Status refused = PlanTensorParallel(odd, 4).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("6 attention heads"), std::string_view::npos) << refused;
  EXPECT_EQ(PlanTensorParallel(tiny, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanTensorParallel(tiny, 8).status().code(), StatusCode::kInvalidArgument);
}

// Logits at every position a run computes, through tp_size runners meeting in one communicator
// (as the engine runs them): a whole prefill, then token by token.
std::vector<float> LogitsAtEveryPosition(const ModelWeights& w, int32_t tp, kv::Layout layout,
                                         const std::vector<int32_t>& tokens) {
  const ModelConfig& c = w.config;
  const auto shards = PlanTensorParallel(c, tp).value();
  TpCommunicator comm(tp);
  ThreadPool rank_threads(tp);
  const auto rope = MakeRopeTable(c, 512);
  std::vector<std::unique_ptr<kv::KvCache>> caches;
  std::vector<ModelShard> model_shards;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<ModelRunner>> runners;
  model_shards.reserve(tp);
  for (int32_t r = 0; r < tp; ++r) {
    kv::CacheSpec spec;
    spec.num_layers = c.num_layers;
    spec.num_kv_heads = shards[r].num_kv_heads;
    spec.head_dim = c.kv_cache_head_dim();
    spec.kind = c.is_mla() ? kv::AttentionKind::kMLA : kv::AttentionKind::kStandard;
    spec.mla_rope_dim = c.is_mla() ? c.mla.qk_rope_head_dim : 0;
    spec.layout = layout;
    spec.block_size_kernel = 16;
    spec.num_blocks_kernel = 32;
    caches.push_back(kv::KvCache::Allocate(spec).value());
    model_shards.push_back(ShardWeights(w, shards[r]));
    pools.push_back(std::make_unique<ThreadPool>(1));
    runners.push_back(std::make_unique<ModelRunner>(&model_shards[r], &comm, rope, caches[r].get(),
                                                    pools[r].get()));
  }
  std::vector<kv::KernelBlockId> table;
  for (int32_t b = 0; b < 32; ++b) table.emplace_back(31 - b);  // scattered blocks
  std::vector<float> out;
  auto run = [&](int32_t first, int32_t n) {
    ForwardChunk ch{std::span<const int32_t>(tokens).subspan(first, n), first, table, true};
    std::vector<float> logits(c.vocab_size);
    rank_threads.RunOnEach([&](int32_t r) {
      runners[r]->Forward(std::span<const ForwardChunk>(&ch, 1), logits.data());
    });
    out.insert(out.end(), logits.begin(), logits.end());
  };
  const int32_t half = static_cast<int32_t>(tokens.size()) / 2;
  run(0, half);
  for (int32_t p = half; p < static_cast<int32_t>(tokens.size()); ++p) run(p, 1);
  return out;
}

TEST(TensorParallelInvarianceTest, LogitsBitIdenticalAcrossTpSizes) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 70; ++i) tokens.push_back(1 + (i * 37) % 250);
  for (const char* model :
       {"tiny", "tiny-kv4", "tiny-odd", "tiny-mla", "tiny-moe", "tiny-mla-moe"}) {
    const ModelWeights w = GenerateWeights(BuiltinModelConfig(model).value()).value();
    for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
      const std::vector<float> ref = LogitsAtEveryPosition(w, 1, layout, tokens);
      for (int32_t tp : {2, 4}) {
        if (!PlanTensorParallel(w.config, tp).ok()) continue;
        const std::vector<float> got = LogitsAtEveryPosition(w, tp, layout, tokens);
        ASSERT_EQ(got.size(), ref.size());
        EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4))
            << model << " tp " << tp << " " << kv::LayoutName(layout);
      }
    }
  }
}

// Through the Engine API: a batch of requests of different lengths, chunked prefill, seeded
// sampling and greedy, top logprobs: everything identical at TP 1, 2 and 4.
std::map<std::string, Completion> RunBatch(const std::string& model, int32_t tp, int32_t block_size,
                                           const std::string& backend, kv::Layout layout,
                                           std::vector<std::vector<TokenLogprob>>* tops) {
  EngineConfig ec;
  ec.model = model;
  ec.tensor_parallel_size = tp;
  ec.num_threads = 1;
  ec.block_size = block_size;
  ec.attention_backend = backend;
  ec.kv_cache_layout = layout;
  ec.num_kv_blocks = 64;
  ec.max_num_batched_tokens = 48;  // chunked prefill
  auto engine = Engine::Create(ec);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  const std::vector<int32_t> lengths = {3, 17, 100, 41};
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> prompt;
    for (int32_t t = 0; t < lengths[i]; ++t) prompt.push_back(1 + (t * 31 + i * 7) % 250);
    SamplingParams sp;
    sp.max_tokens = 12;
    sp.ignore_eos = true;
    sp.top_logprobs = 3;
    if (i % 2 == 1) {
      sp.temperature = 0.9f;
      sp.seed = 11 + i;
    }
    EXPECT_TRUE((*engine)->AddRequest("r" + std::to_string(i), prompt, sp).ok());
  }
  std::map<std::string, Completion> all;
  while ((*engine)->HasWork()) {
    for (RequestOutput& out : (*engine)->Step()) {
      Completion& c = all[out.request_id];
      c.tokens.insert(c.tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
      tops->insert(tops->end(), out.top_logprobs.begin(), out.top_logprobs.end());
    }
  }
  testing_util::ExpectPoolClean(**engine);
  return all;
}

TEST(TensorParallelInvarianceTest, EngineOutputsBitIdenticalAcrossTpSizes) {
  struct Case {
    const char* model;
    int32_t block_size;
    const char* backend;
    kv::Layout layout;
  };
  for (const Case& c : {Case{"tiny", 16, "paged", kv::Layout::kNHD},
                        Case{"tiny-kv4", 128, "flash", kv::Layout::kHND},
                        Case{"tiny-odd", 32, "paged", kv::Layout::kHND},
                        Case{"tiny-mla", 64, "flash", kv::Layout::kNHD},
                        Case{"tiny-moe", 16, "paged", kv::Layout::kHND},
                        Case{"tiny-mla-moe", 32, "flash", kv::Layout::kNHD}}) {
    std::vector<std::vector<TokenLogprob>> ref_tops;
    const auto ref = RunBatch(c.model, 1, c.block_size, c.backend, c.layout, &ref_tops);
    ASSERT_EQ(ref.size(), 4u);
    for (int32_t tp : {2, 4}) {
      if (!PlanTensorParallel(BuiltinModelConfig(c.model).value(), tp).ok()) continue;
      std::vector<std::vector<TokenLogprob>> tops;
      const auto got = RunBatch(c.model, tp, c.block_size, c.backend, c.layout, &tops);
      const std::string what = std::string(c.model) + " tp " + std::to_string(tp);
      ASSERT_EQ(got.size(), ref.size()) << what;
      for (const auto& [id, completion] : ref) {
        testing_util::ExpectSameCompletion(got.at(id), completion, what + " " + id);
      }
      ASSERT_EQ(tops.size(), ref_tops.size()) << what;
      for (size_t i = 0; i < tops.size(); ++i) {
        ASSERT_EQ(tops[i].size(), ref_tops[i].size());
        for (size_t j = 0; j < tops[i].size(); ++j) {
          EXPECT_EQ(tops[i][j].token_id, ref_tops[i][j].token_id) << what;
          EXPECT_EQ(0, std::memcmp(&tops[i][j].logprob, &ref_tops[i][j].logprob, 4)) << what;
        }
      }
    }
  }
}

TEST(TensorParallelEngineTest, RefusesSizesTheModelDoesNotAllow) {
  EngineConfig ec;
  ec.model = "tiny-odd";
  ec.tensor_parallel_size = 4;
  const Status st = Engine::Create(ec).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor_parallel_size 4"), std::string_view::npos) << st;
  ec.tensor_parallel_size = 0;
  EXPECT_EQ(Engine::Create(ec).status().code(), StatusCode::kInvalidArgument);
}

// MLA at TP 2: each rank caches the whole latent (the same bits on every rank).
TEST(TensorParallelEngineTest, MlaLatentIsReplicatedOnEveryRank) {
  EngineConfig ec;
  ec.model = "tiny-mla";
  ec.tensor_parallel_size = 2;
  ec.num_kv_blocks = 10;
  auto engine = Engine::Create(ec).value();
  ASSERT_TRUE(engine->AddRequest("r", {256, 72, 101, 108, 108, 111}, SamplingParams{}).ok());
  while (engine->HasWork()) engine->Step();
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(engine->kv_cache(r)->spec().num_kv_heads, 1);
    EXPECT_EQ(engine->kv_cache(r)->spec().head_dim, 40);
  }
  const kv::RegionView a = engine->kv_cache(0)->region(1), b = engine->kv_cache(1)->region(1);
  ASSERT_EQ(a.size_bytes, b.size_bytes);
  EXPECT_EQ(0, std::memcmp(a.base, b.base, a.size_bytes));
}

// An MLA model's cache: one region per layer, one row of [latent | rope key] per token.
TEST(TensorParallelEngineTest, MlaCacheHoldsLatentAndRopeKeyOnly) {
  EngineConfig ec;
  ec.model = "tiny-mla";
  ec.num_kv_blocks = 10;
  auto engine = Engine::Create(ec).value();
  const kv::CacheSpec& spec = engine->kv_cache(0)->spec();
  EXPECT_EQ(spec.kind, kv::AttentionKind::kMLA);
  EXPECT_EQ(spec.num_regions(), 2);  // tiny-mla's 2 layers
  EXPECT_EQ(spec.num_kv_heads, 1);
  EXPECT_EQ(spec.head_dim, 32 + 8);  // kv_lora_rank + qk_rope_head_dim
  EXPECT_EQ(spec.mla_rope_dim, 8);
  EXPECT_EQ(spec.bytes_per_token_slot(), 40u * 4);
}

TEST(TensorParallelEngineTest, EachRankOwnsACacheOfItsHeads) {
  EngineConfig ec;
  ec.model = "tiny-kv4";
  ec.tensor_parallel_size = 2;
  ec.num_kv_blocks = 10;
  auto engine = Engine::Create(ec).value();
  EXPECT_EQ(engine->tensor_parallel_size(), 2);
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(engine->kv_cache(r)->spec().num_kv_heads, 2);
    EXPECT_EQ(engine->kv_cache(r)->spec().num_blocks_kernel, 10);
  }
  EXPECT_NE(engine->kv_cache(0)->region(0).base, engine->kv_cache(1)->region(0).base);
}

}  // namespace
}  // namespace kvferry::engine
