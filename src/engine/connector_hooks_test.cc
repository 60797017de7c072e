// The scheduler's connector hooks, driven by a fake connector that moves KV between two
// in-process engines (P and D) by copying logical blocks. Proves: WAITING_FOR_REMOTE_KV does not
// block the queue, the loaded prompt is reused and D resumes after P's first token (or, without
// it, recomputes only the last prompt token; outputs equal colocated, bit for bit), delayed free
// holds P's blocks until finished_sending, invalid blocks are recomputed or fail per policy, and
// both pools end where they started.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "engine/engine_test_util.h"
#include "kvferry/engine/engine.h"

namespace kvferry::engine {
namespace {

using testing_util::Completion;
using testing_util::ExpectPoolClean;
using testing_util::ExpectSameCompletion;
using testing_util::RunToEnd;

class FakeConnector : public connector::ConnectorScheduler, public connector::ConnectorWorker {
 public:
  // ---- scheduler half ----
  connector::MatchResult GetNumNewMatchedTokens(const connector::RequestView& r,
                                                int32_t num_local_computed_tokens) override {
    ++match_calls;
    if (r.kv_transfer_params == nullptr || !r.kv_transfer_params->do_remote_prefill) return {};
    const int32_t prompt = static_cast<int32_t>(r.prompt_tokens.size());
    connector::MatchResult m;
    m.num_external_tokens = prompt - num_local_computed_tokens;
    m.load_async = true;
    return m;
  }
  void UpdateStateAfterAlloc(const connector::RequestView& r,
                             std::span<const kv::LogicalBlockId> ids,
                             int32_t num_external_tokens) override {
    if (num_external_tokens == 0) return;
    connector::LoadSpec load;
    load.request_id = r.request_id;
    load.remote = *r.kv_transfer_params;
    load.local_block_ids.assign(ids.begin(), ids.end());
    load.num_external_tokens = num_external_tokens;
    load.num_local_computed_tokens =
        static_cast<int32_t>(r.prompt_tokens.size()) - num_external_tokens;
    pending_meta.loads.push_back(load);
    ++alloc_calls;
  }
  void OnTokensComputed(const connector::RequestView&, std::span<const kv::LogicalBlockId>, int32_t,
                        int32_t) override {}
  connector::FinishResult RequestFinished(const connector::RequestView& r,
                                          std::span<const kv::LogicalBlockId> ids) override {
    finished.insert(r.request_id);
    connector::FinishResult fr;
    if (r.kv_transfer_params != nullptr && r.kv_transfer_params->do_remote_decode) {
      fr.delay_free_blocks = true;
      connector::KvTransferParams p;
      p.do_remote_prefill = true;
      p.remote_engine_id = "P";
      p.remote_request_id = r.request_id;
      p.remote_block_ids.assign(ids.begin(), ids.end());
      p.remote_host = "local";
      p.remote_port = 1;
      // The connector writes the whole hand-off record, P's first token included.
      if (r.first_token != nullptr) p.first_token = *r.first_token;
      fr.kv_transfer_params = p;
    }
    return fr;
  }
  connector::ConnectorMetadata BuildConnectorMeta() override {
    connector::ConnectorMetadata m = std::move(pending_meta);
    pending_meta = {};
    return m;
  }
  void UpdateConnectorOutput(const connector::ConnectorOutput&) override {}

  // ---- worker half ----
  Status RegisterKvCache(kv::KvCache* c, int32_t block_size_logical) override {
    cache = c;
    block_size = block_size_logical;
    return Status::Ok();
  }
  void BindMetadata(const connector::ConnectorMetadata& m) override { bound = m; }
  void StartLoadKv() override {
    for (const connector::LoadSpec& load : bound.loads) {
      const int32_t first = load.num_local_computed_tokens / block_size;
      const int32_t end =
          (load.num_local_computed_tokens + load.num_external_tokens + block_size - 1) / block_size;
      for (int32_t b = first; b < end; ++b) {
        CopyBlock(load.remote.remote_block_ids[b], load.local_block_ids[b]);
        if (b == corrupt_block_index) {
          pending_invalid.push_back(load.local_block_ids[b]);
          ZeroBlock(load.local_block_ids[b]);
        }
      }
      in_flight.push_back({load.request_id, load_delay_steps});
    }
  }
  void AfterForward() override {}
  connector::ConnectorOutput GetFinished() override {
    connector::ConnectorOutput out;
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (it->second-- <= 0) {
        out.finished_recving.push_back(it->first);
        it = in_flight.erase(it);
      } else {
        ++it;
      }
    }
    if (!out.finished_recving.empty()) {
      out.invalid_block_ids = pending_invalid;
      pending_invalid.clear();
    }
    out.finished_sending = std::move(sent);
    sent.clear();
    return out;
  }
  void Shutdown() override {}

  size_t BlockBytes(const kv::KvCache& c) const {
    return c.spec().bytes_per_kernel_block() * (block_size / c.spec().block_size_kernel);
  }
  void CopyBlock(kv::LogicalBlockId from, kv::LogicalBlockId to) {
    const size_t bytes = BlockBytes(*cache);
    for (int32_t r = 0; r < cache->num_regions(); ++r) {
      std::memcpy(cache->region(r).base + to.value() * bytes,
                  source->region(r).base + from.value() * bytes, bytes);
    }
  }
  void ZeroBlock(kv::LogicalBlockId id) {
    const size_t bytes = BlockBytes(*cache);
    for (int32_t r = 0; r < cache->num_regions(); ++r) {
      std::memset(cache->region(r).base + id.value() * bytes, 0, bytes);
    }
  }

  kv::KvCache* cache = nullptr;
  kv::KvCache* source = nullptr;  // D: P's cache
  int32_t block_size = 0;
  int load_delay_steps = 2;
  int corrupt_block_index = -1;
  int match_calls = 0, alloc_calls = 0;
  std::set<std::string> finished;
  std::vector<std::string> sent;  // P: report these as finished_sending next
  connector::ConnectorMetadata pending_meta, bound;
  std::vector<std::pair<std::string, int>> in_flight;
  std::vector<kv::LogicalBlockId> pending_invalid;
};

using testing_util::Greedy;

const char* kPrompt = "Disaggregated serving: the prefill instance computes this prompt's KV.";

struct Pair {
  FakeConnector p_conn, d_conn;
  std::unique_ptr<Engine> p, d;
  explicit Pair(KvLoadFailurePolicy policy = KvLoadFailurePolicy::kRecompute) {
    EngineConfig pc;
    pc.connector_scheduler = &p_conn;
    pc.connector_worker = &p_conn;
    p = std::move(*Engine::Create(pc));
    EngineConfig dc = pc;
    dc.connector_scheduler = &d_conn;
    dc.connector_worker = &d_conn;
    dc.kv_load_failure_policy = policy;
    d = std::move(*Engine::Create(dc));
    d_conn.source = p->kv_cache();
  }
  // P prefills with max_tokens = 1 and returns its kv_transfer_params (blocks held).
  connector::KvTransferParams Prefill(const std::string& id) {
    connector::KvTransferParams in;
    in.do_remote_decode = true;
    EXPECT_TRUE(
        p->AddRequest(id, testing_util::Encode(p->tokenizer(), kPrompt), Greedy(1), in).ok());
    auto out = RunToEnd(*p, 50, /*expect_drain=*/false);  // HasWork stays true while held: bounded
    EXPECT_TRUE(out[id].kv_transfer_params.has_value());
    EXPECT_GT(p->stats().num_blocks_held, 0);
    return *out[id].kv_transfer_params;
  }
  // D takes "req" (kPrompt, 10 greedy tokens) with P's params: the decode leg of the hand-off.
  Status AddDecode(const connector::KvTransferParams& params) {
    return d->AddRequest("req", testing_util::Encode(d->tokenizer(), kPrompt), Greedy(10), params);
  }
};

Completion Colocated(int n) {
  auto e = std::move(*Engine::Create({}));
  EXPECT_TRUE(e->AddRequest("c", testing_util::Encode(e->tokenizer(), kPrompt), Greedy(n)).ok());
  return RunToEnd(*e)["c"];
}

// D resumes from P's first token (loads every prompt token: num_cached_tokens = prompt) or,
// given params without it (vLLM's P), computes the last prompt token itself.
void RemotePrefillEqualsColocated(bool with_first_token) {
  Pair pair;
  auto params = pair.Prefill("req");
  ASSERT_TRUE(params.first_token.has_value());
  if (!with_first_token) params.first_token.reset();
  // D: the remote request parks, a local one keeps running meanwhile.
  ASSERT_TRUE(pair.AddDecode(params).ok());
  ASSERT_TRUE(
      pair.d->AddRequest("local", testing_util::Encode(pair.d->tokenizer(), "hi"), Greedy(3)).ok());
  std::map<std::string, Completion> first_step;
  testing_util::Collect(pair.d->Step(), &first_step);
  EXPECT_EQ(first_step["req"].tokens.size(), with_first_token ? 1u : 0u);
  EXPECT_EQ(pair.d->stats().num_waiting_for_remote_kv, 1);
  EXPECT_EQ(pair.d->stats().num_running, 1);
  auto out = RunToEnd(*pair.d, 100000, true, std::move(first_step));
  ExpectSameCompletion(Colocated(10), out["req"], "disaggregated vs colocated");
  const int32_t prompt_len =
      static_cast<int32_t>(testing_util::Encode(pair.d->tokenizer(), kPrompt).size());
  EXPECT_EQ(out["req"].num_cached_tokens, with_first_token ? prompt_len : prompt_len - 1);
  EXPECT_EQ(out["local"].reason, FinishReason::kLength);
  EXPECT_EQ(pair.d_conn.alloc_calls, 1);
  ExpectPoolClean(*pair.d);
  // P keeps its blocks until the reader says it is done.
  EXPECT_TRUE(pair.p->HasWork());
  EXPECT_FALSE(pair.p->HasComputableWork());
  pair.p_conn.sent.push_back("req");
  pair.p->Step();
  EXPECT_FALSE(pair.p->HasWork());
  ExpectPoolClean(*pair.p);
}

TEST(ConnectorHooksTest, RemotePrefillEqualsColocatedAndPoolsDrain) {
  RemotePrefillEqualsColocated(/*with_first_token=*/true);
}

TEST(ConnectorHooksTest, WithoutFirstTokenDComputesTheLastPromptToken) {
  RemotePrefillEqualsColocated(/*with_first_token=*/false);
}

TEST(ConnectorHooksTest, InvalidBlocksAreRecomputed) {
  Pair pair(KvLoadFailurePolicy::kRecompute);
  pair.d_conn.corrupt_block_index = 2;
  const auto params = pair.Prefill("req");
  ASSERT_TRUE(pair.AddDecode(params).ok());
  auto out = RunToEnd(*pair.d);
  ExpectSameCompletion(Colocated(10), out["req"], "recomputed after invalid block");
  EXPECT_EQ(out["req"].num_cached_tokens, 2 * 16);
  ExpectPoolClean(*pair.d);
  pair.p_conn.sent.push_back("req");
  pair.p->Step();
  ExpectPoolClean(*pair.p);
}

TEST(ConnectorHooksTest, InvalidBlocksFailWithPolicyFail) {
  Pair pair(KvLoadFailurePolicy::kFail);
  pair.d_conn.corrupt_block_index = 0;
  const auto params = pair.Prefill("req");
  ASSERT_TRUE(pair.AddDecode(params).ok());
  auto out = RunToEnd(*pair.d);
  EXPECT_EQ(out["req"].reason, FinishReason::kError);
  EXPECT_EQ(out["req"].error.code(), StatusCode::kDataLoss);
  // Only P's first token, reported when D took the request; nothing computed on D.
  ASSERT_TRUE(params.first_token.has_value());
  EXPECT_EQ(out["req"].tokens, std::vector<int32_t>{params.first_token->token_id});
  EXPECT_EQ(pair.d_conn.finished.count("req"), 1u);
  ExpectPoolClean(*pair.d);
}

TEST(ConnectorHooksTest, AbortWhileLoadingWaitsForTheLoad) {
  Pair pair;
  pair.d_conn.load_delay_steps = 5;
  const auto params = pair.Prefill("req");
  ASSERT_TRUE(pair.AddDecode(params).ok());
  pair.d->Step();
  ASSERT_TRUE(pair.d->Abort("req").ok());
  auto first = pair.d->Step();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].finish_reason, FinishReason::kAbort);
  // Blocks stay allocated until the connector reports the load finished.
  EXPECT_GT(pair.d->stats().num_blocks_used, 0);
  RunToEnd(*pair.d, 20);
  EXPECT_EQ(pair.d_conn.finished.count("req"), 1u);
  ExpectPoolClean(*pair.d);
}

}  // namespace
}  // namespace kvferry::engine
