#include "kvferry/engine/engine.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "engine/engine_test_util.h"
#include "engine/model/model_loader.h"
#include "engine/weights.h"

namespace kvferry::engine {
namespace {

using testing_util::Completion;
using testing_util::ExpectPoolClean;
using testing_util::ExpectSameCompletion;
using testing_util::RunToEnd;

std::unique_ptr<Engine> Make(EngineConfig c = {}) {
  auto e = Engine::Create(c);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

using testing_util::Greedy;

const std::vector<std::string> kPrompts = {"The capital of France is",
                                           "Once upon a time, in a land far away, there lived",
                                           "1 2 3 4 5 6 7", "kvferry"};

std::map<std::string, Completion> RunPrompts(EngineConfig config, SamplingParams params,
                                             std::vector<int> which = {0, 1, 2, 3}) {
  auto e = Make(config);
  for (int i : which) {
    EXPECT_TRUE(e->AddRequest("r" + std::to_string(i),
                              testing_util::Encode(e->tokenizer(), kPrompts[i]), params)
                    .ok());
  }
  auto out = RunToEnd(*e);
  ExpectPoolClean(*e);
  return out;
}

TEST(EngineTest, CreateRejectsBadConfig) {
  EngineConfig c;
  c.model = "huge";
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kNotFound);
  c = {};
  c.attention_backend = "nope";
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kNotFound);
  c = {};
  c.attention_backend = "flash";
  c.block_size = 24;
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = {};
  c.max_model_len = 100000;
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = {};
  c.num_threads = 0;
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = {};
  c.kv_cache_layout = kv::Layout::kVllmCpu;  // vLLM's layout: the connector's, not the kernels'
  const Status layout = Engine::Create(c).status();
  EXPECT_EQ(layout.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(layout.message().find("VLLM_CPU"), std::string_view::npos) << layout;
}

TEST(EngineTest, TinyOddHasNoWidthAMultipleOf8) {
  // Its purpose (docs/engine.md, "Models"): the kernels' tail code runs in a real forward pass.
  auto c = BuiltinModelConfig("tiny-odd");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Validate().ok());
  for (int32_t width : {c->vocab_size, c->hidden_dim, c->head_dim, c->ffn_dim,
                        c->num_heads * c->head_dim, c->head_dim / 2}) {
    EXPECT_NE(width % 8, 0) << width;
  }
  EXPECT_GT(c->num_heads / c->num_kv_heads, 1);  // grouped-query
  EXPECT_NE(c->vocab_size % 4, 0);               // the matmul's 1x1 edge columns run
}

TEST(EngineTest, FlashWithBlock128UsesKernel64) {
  EngineConfig c;
  c.block_size = 128;
  c.attention_backend = "flash";
  auto e = Make(c);
  EXPECT_EQ(e->block_size_logical(), 128);
  EXPECT_EQ(e->block_size_kernel(), 64);
  EXPECT_EQ(e->kv_cache()->spec().block_size_kernel, 64);
}

TEST(EngineTest, AddRequestRejectsBadInput) {
  EngineConfig c;
  c.max_model_len = 32;
  auto e = Make(c);
  EXPECT_EQ(e->AddRequest("a", {}, Greedy(4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("", {1, 2}, Greedy(4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("a", {1, 99999}, Greedy(4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("a", std::vector<int32_t>(32, 65), Greedy(4)).code(),
            StatusCode::kInvalidArgument);
  SamplingParams bad = Greedy(4);
  bad.top_p = 0.0f;
  EXPECT_EQ(e->AddRequest("a", {1, 2}, bad).code(), StatusCode::kInvalidArgument);
  bad = Greedy(0);
  EXPECT_EQ(e->AddRequest("a", {1, 2}, bad).code(), StatusCode::kInvalidArgument);
  bad = Greedy(4);
  bad.temperature = -1;
  EXPECT_EQ(e->AddRequest("a", {1, 2}, bad).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(e->AddRequest("a", std::vector<int32_t>(31, 65), Greedy(4)).ok());
  EXPECT_EQ(e->AddRequest("a", {1, 2}, Greedy(4)).code(), StatusCode::kAlreadyExists);
  auto out = RunToEnd(*e);
  // max_model_len caps the generation: 31 prompt tokens + 1.
  EXPECT_EQ(out["a"].tokens.size(), 1u);
  EXPECT_EQ(out["a"].reason, FinishReason::kLength);
}

TEST(EngineTest, GreedyOutputDependsOnThePrompt) {
  auto out = RunPrompts({}, Greedy(24));
  std::set<std::vector<int32_t>> distinct;
  for (auto& [id, c] : out) {
    EXPECT_EQ(c.tokens.size(), 24u) << id;
    EXPECT_EQ(c.reason, FinishReason::kLength);
    EXPECT_EQ(c.finished_count, 1);
    std::set<int32_t> toks(c.tokens.begin(), c.tokens.end());
    EXPECT_GT(toks.size(), 2u) << id << ": output is (nearly) a constant token";
    distinct.insert(c.tokens);
    for (float lp : c.logprobs) EXPECT_LE(lp, 0.0f);
  }
  EXPECT_EQ(distinct.size(), out.size());
}

TEST(EngineTest, OutputsIdenticalAcrossBatchingBudgetGeometryAndThreads) {
  const auto expected = RunPrompts({}, Greedy(12), {0});
  std::vector<EngineConfig> configs;
  EngineConfig c;
  configs.push_back(c);          // batched with the others
  c.max_num_batched_tokens = 5;  // chunked prefill, several steps
  configs.push_back(c);
  c = {};
  c.block_size = 128;
  c.attention_backend = "flash";
  configs.push_back(c);
  c.kv_cache_layout = kv::Layout::kHND;
  c.num_threads = 1;
  configs.push_back(c);
  c = {};
  c.block_size = 32;
  c.enable_prefix_caching = false;
  c.max_num_batched_tokens = 9;
  configs.push_back(c);
  for (size_t i = 0; i < configs.size(); ++i) {
    auto out = RunPrompts(configs[i], Greedy(12));
    ExpectSameCompletion(expected.at("r0"), out.at("r0"), "config " + std::to_string(i));
  }
}

// A 378-token prompt, prefilled in chunks of the default budget (256 + 122) and batched with the
// short prompts, then 12 greedy tokens: decode crosses position 384, a boundary of every kernel
// block size. Same tokens and logprobs with kernel blocks of 16/32/64/128 in both layouts, with
// logical blocks of 128 over kernel blocks of 64, with a small budget and one thread; for tiny
// for tiny-odd (SIMD tails) and for tiny-mla (multi-head latent attention).
TEST(EngineTest, LongPromptOutputsIdenticalAcrossBlockSizesAndLayouts) {
  const std::vector<int32_t> long_prompt =
      testing_util::Encode(tokenizer::Tokenizer::BuiltinByteLevel(), testing_util::LongText(377));
  ASSERT_EQ(long_prompt.size(), 378u);
  for (const std::string model : {"tiny", "tiny-odd", "tiny-mla"}) {
    auto run = [&](EngineConfig c) {
      c.model = model;
      auto e = Make(c);
      for (int i : {0, 1}) {
        EXPECT_TRUE(e->AddRequest("r" + std::to_string(i),
                                  testing_util::Encode(e->tokenizer(), kPrompts[i]), Greedy(12))
                        .ok());
      }
      EXPECT_TRUE(e->AddRequest("long", long_prompt, Greedy(12)).ok());
      auto out = RunToEnd(*e);
      ExpectPoolClean(*e);
      return out.at("long");
    };
    const Completion expected = run({});
    ASSERT_EQ(expected.tokens.size(), 12u) << model;
    std::vector<EngineConfig> configs;
    for (int32_t bs : {16, 32, 64, 128}) {
      for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
        EngineConfig c;
        c.block_size = bs;  // paged: kernel blocks of the same size
        c.kv_cache_layout = layout;
        configs.push_back(c);
      }
    }
    EngineConfig c;
    c.block_size = 128;
    c.attention_backend = "flash";  // kernel blocks of 64, two per logical block
    c.max_num_batched_tokens = 100;
    c.num_threads = 1;
    configs.push_back(c);
    for (const EngineConfig& config : configs) {
      ExpectSameCompletion(expected, run(config),
                           model + ", block " + std::to_string(config.block_size) + " " +
                               config.attention_backend + " " +
                               std::string(kv::LayoutName(config.kv_cache_layout)));
    }
  }
}

TEST(EngineTest, HalfPrecisionCachesAreInvariantAcrossGeometry) {
  for (kv::DType dtype : {kv::DType::kF16, kv::DType::kBF16}) {
    EngineConfig base;
    base.kv_cache_dtype = dtype;
    const auto expected = RunPrompts(base, Greedy(12), {1});
    EngineConfig c = base;
    c.block_size = 128;
    c.attention_backend = "flash";
    c.kv_cache_layout = kv::Layout::kHND;
    c.max_num_batched_tokens = 6;
    const auto out = RunPrompts(c, Greedy(12));
    ExpectSameCompletion(expected.at("r1"), out.at("r1"), std::string(kv::DTypeName(dtype)));
  }
}

TEST(EngineTest, PrefixCacheHitsGiveIdenticalOutput) {
  EngineConfig c;
  c.block_size = 16;
  auto e = Make(c);
  const std::string prefix = "A long shared system prompt that spans several blocks. ";
  auto p1 = testing_util::Encode(e->tokenizer(), prefix + "First question?");
  auto p2 = testing_util::Encode(e->tokenizer(), prefix + "Second question!");
  ASSERT_TRUE(e->AddRequest("a", p1, Greedy(8)).ok());
  auto first = RunToEnd(*e);
  ASSERT_TRUE(e->AddRequest("b", p2, Greedy(8)).ok());
  auto second = RunToEnd(*e);
  EXPECT_GE(second["b"].num_cached_tokens, 48);
  EXPECT_GE(e->stats().num_prefix_cache_hit_tokens, 48);
  ExpectPoolClean(*e);
  // Same prompt again: everything but the last token comes from the cache.
  ASSERT_TRUE(e->AddRequest("a2", p1, Greedy(8)).ok());
  auto again = RunToEnd(*e);
  ExpectSameCompletion(first["a"], again["a2"], "repeat");

  EngineConfig nc = c;
  nc.enable_prefix_caching = false;
  auto f = Make(nc);
  ASSERT_TRUE(f->AddRequest("b", p2, Greedy(8)).ok());
  auto cold = RunToEnd(*f);
  ExpectSameCompletion(second["b"], cold["b"], "prefix hit vs cold");
  EXPECT_EQ(cold["b"].num_cached_tokens, 0);
}

TEST(EngineTest, PreemptionByRecomputeKeepsOutputs) {
  const auto expected = RunPrompts({}, Greedy(40));
  EngineConfig c;
  c.num_kv_blocks = 7;  // 4 requests of ~50-90 tokens each in 16-token blocks: must preempt
  c.max_num_batched_tokens = 64;
  auto e = Make(c);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(e->AddRequest("r" + std::to_string(i),
                              testing_util::Encode(e->tokenizer(), kPrompts[i]), Greedy(40))
                    .ok());
  }
  auto out = RunToEnd(*e);
  EXPECT_GT(e->stats().num_preemptions, 0);
  for (auto& [id, comp] : expected) ExpectSameCompletion(comp, out[id], id);
  ExpectPoolClean(*e);
}

TEST(EngineTest, SeededSamplingIsIndependentOfBatch) {
  SamplingParams p;
  p.max_tokens = 16;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.seed = 1234;
  p.ignore_eos = true;
  const auto alone = RunPrompts({}, p, {1});
  EngineConfig c;
  c.max_num_batched_tokens = 7;
  const auto batched = RunPrompts(c, p, {0, 1, 2});
  ExpectSameCompletion(alone.at("r1"), batched.at("r1"), "seeded");
  p.seed = 99;
  const auto other = RunPrompts({}, p, {1});
  EXPECT_NE(alone.at("r1").tokens, other.at("r1").tokens);
  // Sampling differs from greedy.
  const auto greedy = RunPrompts({}, Greedy(16), {1});
  EXPECT_NE(alone.at("r1").tokens, greedy.at("r1").tokens);
}

TEST(EngineTest, AbortFinishesOnceAndFreesBlocks) {
  auto e = Make();
  ASSERT_TRUE(
      e->AddRequest("a", testing_util::Encode(e->tokenizer(), "abort me"), Greedy(50)).ok());
  ASSERT_TRUE(e->AddRequest("b", testing_util::Encode(e->tokenizer(), "keep me"), Greedy(5)).ok());
  e->Step();
  e->Step();
  ASSERT_TRUE(e->Abort("a").ok());
  EXPECT_EQ(e->Abort("a").code(), StatusCode::kNotFound);
  EXPECT_EQ(e->Abort("zzz").code(), StatusCode::kNotFound);
  auto out = RunToEnd(*e);
  EXPECT_EQ(out["a"].reason, FinishReason::kAbort);
  EXPECT_EQ(out["a"].finished_count, 1);
  EXPECT_EQ(out["b"].reason, FinishReason::kLength);
  ExpectPoolClean(*e);
  // Aborting the only request still reports it: HasWork() stays true until the next Step().
  ASSERT_TRUE(e->AddRequest("c", testing_util::Encode(e->tokenizer(), "only"), Greedy(50)).ok());
  e->Step();
  ASSERT_TRUE(e->Abort("c").ok());
  EXPECT_TRUE(e->HasWork());
  auto last = e->Step();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(e->HasWork());
  ExpectPoolClean(*e);
}

TEST(EngineTest, PendingPrefillTokensCountWhatIsLeftToCompute) {
  EngineConfig c;
  c.max_num_batched_tokens = 32;
  auto e = Make(c);
  const auto long_prompt = testing_util::Encode(e->tokenizer(), std::string(100, 'x'));
  const auto short_prompt = testing_util::Encode(e->tokenizer(), "twenty bytes or so..");
  const int64_t total = static_cast<int64_t>(long_prompt.size() + short_prompt.size());
  ASSERT_TRUE(e->AddRequest("long", long_prompt, Greedy(2)).ok());
  ASSERT_TRUE(e->AddRequest("short", short_prompt, Greedy(2)).ok());
  EXPECT_EQ(e->stats().num_pending_prefill_tokens, total);
  e->Step();  // one chunk of the 32-token budget
  EXPECT_EQ(e->stats().num_pending_prefill_tokens, total - 32);
  RunToEnd(*e);
  EXPECT_EQ(e->stats().num_pending_prefill_tokens, 0);
}

TEST(EngineTest, StopsOnStopToken) {
  const auto free_run = RunPrompts({}, Greedy(10), {0});
  const int32_t third = free_run.at("r0").tokens[2];
  SamplingParams p = Greedy(10);
  p.stop_token_ids = {third};
  const auto stopped = RunPrompts({}, p, {0});
  const auto& t = stopped.at("r0").tokens;
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.back(), third);
  EXPECT_LE(t.size(), 3u);
  EXPECT_EQ(stopped.at("r0").reason, FinishReason::kStop);
}

TEST(EngineTest, TopLogprobsAreSortedAndIncludeGreedyChoice) {
  auto e = Make();
  SamplingParams p = Greedy(3);
  p.top_logprobs = 5;
  ASSERT_TRUE(e->AddRequest("a", testing_util::Encode(e->tokenizer(), "hi"), p).ok());
  int seen = 0;
  while (e->HasWork()) {
    for (auto& out : e->Step()) {
      ASSERT_EQ(out.top_logprobs.size(), out.new_token_ids.size());
      for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
        const auto& top = out.top_logprobs[i];
        ASSERT_EQ(top.size(), 5u);
        EXPECT_EQ(top[0].token_id, out.new_token_ids[i]);
        EXPECT_EQ(top[0].logprob, out.new_logprobs[i]);
        for (size_t k = 1; k < top.size(); ++k) EXPECT_GE(top[k - 1].logprob, top[k].logprob);
        ++seen;
      }
    }
  }
  EXPECT_EQ(seen, 3);
}

TEST(EngineTest, CheckpointRoundTripGivesSameOutput) {
  auto weights = GenerateWeights(*BuiltinModelConfig("tiny"));
  ASSERT_TRUE(weights.ok());
  const std::string path = ::testing::TempDir() + "/kvferry_tiny.safetensors";
  ASSERT_TRUE(SaveCheckpoint(*weights, path).ok());
  EngineConfig c;
  c.model = path;
  const auto from_file = RunPrompts(c, Greedy(10), {2});
  const auto builtin = RunPrompts({}, Greedy(10), {2});
  ExpectSameCompletion(builtin.at("r2"), from_file.at("r2"), "checkpoint");
  // A truncated file is an error, not a crash.
  std::filesystem::resize_file(path, 1000);
  EXPECT_FALSE(LoadModelWeights(path).ok());
  std::remove(path.c_str());
  EXPECT_EQ(LoadModelWeights(path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvferry::engine
