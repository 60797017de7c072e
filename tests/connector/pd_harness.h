// Test-only: a P engine and a D engine, each with a real FerryConnector, in one process, plus a
// colocated reference. Runs the hand-off of docs/connector.md §2 the way a proxy does:
//   P: the prompt with the request's sampling params, max_tokens 1 and
//      {"do_remote_decode": true} -> kv_transfer_params with P's first token
//   D: the prompt with the caller's sampling params and those params -> the completion (the
//      first token P's, the rest D's)
// and steps both engines until D is done and P has freed its blocks.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/connector/ferry_connector.h"
#include "kvferry/engine/engine.h"
#include "kvferry/server/instance.h"

namespace kvferry::pd_test {

struct InstanceSpec {
  int32_t block_size = 16;  // logical
  std::string backend = "paged";
  kv::Layout layout = kv::Layout::kNHD;
  bool host_buffer = false;
  int32_t num_kv_blocks = 0;             // 0: room for 2048 tokens plus a few blocks
  int32_t max_num_batched_tokens = 512;  // P: a 600-token prompt prefills in 2 chunks
  kv::DType dtype = kv::DType::kF32;     // KV cache storage
  int32_t tp = 1;                        // tensor-parallel ranks
  std::string model = "tiny";
};

inline std::string Describe(const InstanceSpec& s) {
  return std::to_string(s.block_size) + "/" + s.backend + "/" +
         std::string(kv::LayoutName(s.layout)) + (s.host_buffer ? "/cpu" : "") +
         (s.dtype != kv::DType::kF32 ? "/" + std::string(kv::DTypeName(s.dtype)) : "") +
         (s.tp != 1 ? "/tp" + std::to_string(s.tp) : "") + (s.model != "tiny" ? "/" + s.model : "");
}

// Records every ConnectorOutput the engine consumed (to assert reported logical ids).
class RecordingWorker : public connector::ConnectorWorker {
 public:
  explicit RecordingWorker(connector::ConnectorWorker* inner) : inner_(inner) {}
  std::optional<kv::CacheMemory> CacheMemoryFor(int32_t rank) override {
    return inner_->CacheMemoryFor(rank);
  }
  Status RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) override {
    return inner_->RegisterKvCache(cache, block_size_logical);
  }
  Status RegisterKvCaches(std::span<kv::KvCache* const> caches, const kv::HeadSharding& sharding,
                          int32_t block_size_logical) override {
    return inner_->RegisterKvCaches(caches, sharding, block_size_logical);
  }
  void BindMetadata(const connector::ConnectorMetadata& m) override {
    loads.insert(loads.end(), m.loads.begin(), m.loads.end());
    inner_->BindMetadata(m);
  }
  void StartLoadKv() override { inner_->StartLoadKv(); }
  void AfterForward() override { inner_->AfterForward(); }
  connector::ConnectorOutput GetFinished() override {
    connector::ConnectorOutput out = inner_->GetFinished();
    invalid.insert(invalid.end(), out.invalid_block_ids.begin(), out.invalid_block_ids.end());
    finished_recving.insert(finished_recving.end(), out.finished_recving.begin(),
                            out.finished_recving.end());
    return out;
  }
  void Shutdown() override { inner_->Shutdown(); }

  std::vector<kv::LogicalBlockId> invalid;
  std::vector<std::string> finished_recving;
  std::vector<connector::LoadSpec> loads;  // every load the engine asked for

 private:
  connector::ConnectorWorker* inner_;
};

// One P or D: a server::Instance whose worker half is recorded.
struct Instance {
  engine::Engine* engine() const { return &owned->engine(); }
  connector::FerryConnector* connector() const { return owned->connector(); }

  std::unique_ptr<server::Instance> owned;
  RecordingWorker* worker = nullptr;  // owned's
  connector::KvTransferConfig config;
};

inline int NextInstanceNumber() {
  static int n = 0;
  return ++n;
}

inline engine::EngineConfig BaseEngineConfig(const InstanceSpec& s) {
  engine::EngineConfig ec;
  ec.model = s.model;
  ec.tensor_parallel_size = s.tp;
  ec.block_size = s.block_size;
  ec.attention_backend = s.backend;
  ec.kv_cache_layout = s.layout;
  ec.num_kv_blocks = s.num_kv_blocks > 0 ? s.num_kv_blocks : 2048 / s.block_size + 8;
  ec.max_num_batched_tokens = s.max_num_batched_tokens;
  ec.kv_cache_dtype = s.dtype;
  ec.num_threads = 1;
  return ec;
}

// `config` supplies the extra settings (timeouts, lease, auth, backend, kv_load_failure_policy
// for both the connector and the engine); engine id, buffer device and (unless set) backend
// are filled in here.
inline std::unique_ptr<Instance> MakeInstance(const std::string& role, const InstanceSpec& s,
                                              connector::KvTransferConfig config = {}) {
  auto inst = std::make_unique<Instance>();
  config.engine_id = role + "-" + std::to_string(NextInstanceNumber());
  config.kv_buffer_device = s.host_buffer ? "cpu" : "direct";
  if (config.handshake_timeout_ms == connector::KvTransferConfig{}.handshake_timeout_ms) {
    config.handshake_timeout_ms = 3000;
  }
  inst->config = config;
  RecordingWorker* recorder = nullptr;
  auto owned =
      server::Instance::Create({.engine = BaseEngineConfig(s),
                                .kv_transfer = config,
                                .wrap_worker = [&recorder](connector::ConnectorWorker* inner) {
                                  auto w = std::make_unique<RecordingWorker>(inner);
                                  recorder = w.get();
                                  return std::unique_ptr<connector::ConnectorWorker>(std::move(w));
                                }});
  EXPECT_TRUE(owned.ok()) << owned.status();
  if (!owned.ok()) return nullptr;
  inst->owned = std::move(*owned);
  inst->worker = recorder;
  return inst;
}

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  engine::FinishReason reason = engine::FinishReason::kNone;
  Status error;
  std::optional<connector::KvTransferParams> kv_transfer_params;
  int32_t num_cached_tokens = 0;
  std::optional<connector::LoadReport> kv_load;  // D: how the prompt's KV arrived
  bool finished = false;
};

inline void Collect(std::vector<engine::RequestOutput> outs,
                    std::map<std::string, Completion>* all) {
  for (engine::RequestOutput& o : outs) {
    Completion& c = (*all)[o.request_id];
    c.tokens.insert(c.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    c.logprobs.insert(c.logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
    if (o.finished) {
      c.finished = true;
      c.reason = o.finish_reason;
      c.error = o.error;
      c.kv_transfer_params = o.kv_transfer_params;
      c.num_cached_tokens = o.num_cached_tokens;
      c.kv_load = o.kv_load;
    }
  }
}

// Steps the given engines until none has work, or `timeout_ms` passed.
inline std::map<std::string, Completion> RunAll(std::vector<engine::Engine*> engines,
                                                int64_t timeout_ms = 20000) {
  std::map<std::string, Completion> all;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    bool work = false, computable = false;
    for (engine::Engine* e : engines) {
      if (!e->HasWork()) continue;
      work = true;
      Collect(e->Step(), &all);
      computable = computable || e->HasComputableWork();
    }
    if (!work) break;
    if (!computable) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return all;
}

// The colocated reference (TP 1); `dtype` is the KV cache's (f16/bf16 storage rounds K and V,
// so a P/D pair is compared with a colocated instance of the same KV dtype).
inline Completion Colocated(const std::vector<int32_t>& prompt,
                            const engine::SamplingParams& params, kv::DType dtype = kv::DType::kF32,
                            const std::string& model = "tiny") {
  InstanceSpec spec;
  spec.dtype = dtype;
  spec.model = model;
  engine::EngineConfig ec = BaseEngineConfig(spec);
  auto eng = engine::Engine::Create(ec);
  EXPECT_TRUE(eng.ok()) << eng.status();
  EXPECT_TRUE((*eng)->AddRequest("ref", prompt, params).ok());
  return RunAll({eng->get()})["ref"];
}

// P's half of the hand-off: the request's own sampling params with max_tokens 1, as the proxy
// sends it; returns P's kv_transfer_params, with P's first token (the engine keeps holding the
// blocks).
inline std::optional<connector::KvTransferParams> Prefill(
    Instance& p, const std::string& id, const std::vector<int32_t>& prompt,
    engine::SamplingParams sp = [] {
      engine::SamplingParams greedy;
      greedy.ignore_eos = true;
      return greedy;
    }()) {
  sp.max_tokens = 1;
  connector::KvTransferParams in;
  in.do_remote_decode = true;
  Status st = p.engine()->AddRequest(id, prompt, sp, in);
  EXPECT_TRUE(st.ok()) << st;
  std::map<std::string, Completion> all;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!all[id].finished && std::chrono::steady_clock::now() < deadline) {
    Collect(p.engine()->Step(), &all);
  }
  EXPECT_TRUE(all[id].finished);
  return all[id].kv_transfer_params;
}

inline void ExpectSame(const Completion& a, const Completion& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * 4)) << what;
}

// Bytes a pull of tokens [begin, end) reads from P: P's kernel blocks covering them, in every
// region (the built-in `tiny`: 4 layers -> 8 regions, 2 KV heads x head dim 32).
inline uint64_t TinyPullBytes(int32_t p_block_size_kernel, int64_t begin, int64_t end,
                              kv::DType dtype = kv::DType::kF32) {
  const int64_t blocks =
      (end + p_block_size_kernel - 1) / p_block_size_kernel - begin / p_block_size_kernel;
  return static_cast<uint64_t>(blocks) * 8 * p_block_size_kernel * 2 * 32 * kv::DTypeBytes(dtype);
}

// The same for one D rank of a tensor-parallel D, any built-in: exactly that rank's KV heads
// (HeadsPerRank of D's sharding) of P's kernel blocks covering the tokens, in every region.
inline uint64_t RankPullBytes(const std::string& model, int32_t d_tp, int32_t p_block_size_kernel,
                              int64_t begin, int64_t end, kv::DType dtype = kv::DType::kF32) {
  const engine::ModelConfig m = engine::BuiltinModelConfig(model).value();
  const int32_t heads = kv::HeadSharding::Create(m.num_kv_heads, d_tp).value().HeadsPerRank();
  const int64_t blocks =
      (end + p_block_size_kernel - 1) / p_block_size_kernel - begin / p_block_size_kernel;
  return static_cast<uint64_t>(blocks) * 2 * m.num_layers * p_block_size_kernel * heads *
         m.head_dim * kv::DTypeBytes(dtype);
}

// The request's KV was really pulled (a recompute gives the same tokens, so equality of outputs
// alone proves nothing): `tokens` prompt tokens read from P in one load, `bytes` bytes (0: any
// positive amount), no fallback.
inline void ExpectPulled(const Completion& c, int32_t tokens, uint64_t bytes,
                         const std::string& what) {
  ASSERT_TRUE(c.kv_load.has_value()) << what << ": no kv_load report";
  EXPECT_EQ(c.kv_load->outcome, connector::LoadOutcome::kPulled)
      << what << ": " << connector::LoadOutcomeName(c.kv_load->outcome);
  EXPECT_EQ(c.kv_load->tokens, tokens) << what;
  if (bytes > 0) {
    EXPECT_EQ(c.kv_load->bytes, bytes) << what;
  } else {
    EXPECT_GT(c.kv_load->bytes, 0u) << what;
  }
}

inline void ExpectOutcome(const Completion& c, connector::LoadOutcome outcome,
                          const std::string& what) {
  ASSERT_TRUE(c.kv_load.has_value()) << what << ": no kv_load report";
  EXPECT_EQ(connector::LoadOutcomeName(c.kv_load->outcome), connector::LoadOutcomeName(outcome))
      << what;
}

inline void ExpectPoolClean(const engine::Engine& e, const std::string& what) {
  const engine::EngineStats s = e.stats();
  EXPECT_EQ(s.num_blocks_used, 0) << what;
  EXPECT_EQ(s.num_blocks_held, 0) << what;
  EXPECT_EQ(s.num_blocks_free + s.num_blocks_cached, s.num_blocks_total) << what;
  EXPECT_EQ(s.num_waiting_for_remote_kv, 0) << what;
}

inline std::vector<int32_t> MakePrompt(int32_t n, int32_t salt = 0) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = 1 + static_cast<int32_t>((i * 37 + salt * 11) % 250);
  return v;
}

// A loopback config with the given overrides (0 / empty: the default).
inline connector::KvTransferConfig Config(int64_t lease_ms = 0, std::string auth_token = "",
                                          int64_t transfer_timeout_ms = 0) {
  connector::KvTransferConfig c;
  c.backend = transfer::BackendKind::kLoopback;
  if (lease_ms > 0) c.lease_ms = lease_ms;
  c.auth_token = std::move(auth_token);
  if (transfer_timeout_ms > 0) c.transfer_timeout_ms = transfer_timeout_ms;
  return c;
}

inline engine::SamplingParams Greedy(int32_t max_tokens) {
  engine::SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

struct Case {
  InstanceSpec p, d;
};

// One P/D pair over two prompts (shorter than a block, and spanning many); D's completions must
// equal the colocated ones, and both pools must be clean afterwards.
inline void RunPair(const Case& c, const std::vector<std::vector<int32_t>>& prompts,
                    const std::vector<Completion>& reference, const engine::SamplingParams& sp) {
  SCOPED_TRACE("P " + Describe(c.p) + "  D " + Describe(c.d));
  auto p = MakeInstance("P", c.p, Config());
  auto d = MakeInstance("D", c.d, Config());
  ASSERT_TRUE(p && d);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "req" + std::to_string(i);
    auto params = Prefill(*p, id, prompts[i], sp);
    ASSERT_TRUE(params.has_value());
    ASSERT_TRUE(params->first_token.has_value());
    ASSERT_TRUE(d->engine()->AddRequest(id, prompts[i], sp, *params).ok());
    auto all = RunAll({d->engine(), p->engine()});
    ASSERT_TRUE(all[id].finished);
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    ExpectSame(all[id], reference[i], "prompt " + std::to_string(n));
    // D resumed after P's first token: every prompt token's KV came from P.
    EXPECT_EQ(all[id].num_cached_tokens, n);
    ExpectPulled(all[id], n, TinyPullBytes(p->engine()->block_size_kernel(), 0, n, c.p.dtype),
                 "prompt " + std::to_string(n));
  }
  EXPECT_TRUE(d->worker->invalid.empty());
  EXPECT_EQ(d->connector()->Stats().transfers, prompts.size());
  EXPECT_EQ(d->connector()->Stats().notifications_sent, prompts.size());
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, prompts.size());
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

}  // namespace kvferry::pd_test
