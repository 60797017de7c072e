// P and D engines with real FerryConnectors in one process over the loopback backend: D's output
// equals colocated output token for token and logprob for logprob over a geometry matrix, every
// failure kind is reported with D's logical blocks and recovered (or failed, per policy), and
// both pools end where they started.
#include <gtest/gtest.h>

#include <cstdlib>

#include "connector/ferry_connector_impl.h"
#include "kvferry/transfer/loopback.h"
#include "pd_harness.h"

namespace kvferry::pd_test {
namespace {

using kv::Layout;

class PdEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prompts_ = {MakePrompt(5, 1), MakePrompt(600, 2)};
    for (const auto& prompt : prompts_) reference_.push_back(Colocated(prompt, Greedy(4)));
  }
  static std::vector<std::vector<int32_t>> prompts_;
  static std::vector<Completion> reference_;
};
std::vector<std::vector<int32_t>> PdEngineTest::prompts_;
std::vector<Completion> PdEngineTest::reference_;

TEST_F(PdEngineTest, SeedConfigurationBlockSize128OnFlash) {
  // The seed's case: --block-size 128 on a backend whose kernel pages are at most 64 (R = 2).
  RunPair({{128, "flash", Layout::kNHD, false}, {128, "flash", Layout::kNHD, false}}, prompts_,
          reference_, Greedy(4));
  RunPair({{128, "flash", Layout::kHND, true}, {128, "flash", Layout::kHND, true}}, prompts_,
          reference_, Greedy(4));
}

TEST_F(PdEngineTest, ChunkedPrefillHostBufferStagesEveryChunk) {
  // vLLM #30358: with a host buffer only the first chunk of a chunked prefill was staged. Here
  // P prefills 600 tokens in chunks of 48 (not a multiple of any block size) into its host
  // buffer: logical 128 on flash (kernel 64, R = 2), then logical 32 (kernel 32).
  InstanceSpec ps{128, "flash", Layout::kHND, true};
  ps.max_num_batched_tokens = 48;
  RunPair({ps, {64, "paged", Layout::kNHD, true}}, prompts_, reference_, Greedy(4));
  ps.block_size = 32;
  RunPair({ps, {256, "flash", Layout::kHND, false}}, prompts_, reference_, Greedy(4));
}

TEST_F(PdEngineTest, HostBufferPrefixHitOnP) {
  // P's prefix cache serves the first blocks of a remote-decode prompt from a request that was
  // not a remote decode (so nothing staged them); the host buffer must still hold them.
  auto p = MakeInstance("P", {64, "flash", Layout::kHND, true}, Config());
  auto d = MakeInstance("D", {128, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  const std::vector<int32_t>& prompt = prompts_[1];
  std::vector<int32_t> head(prompt.begin(), prompt.begin() + 400);
  ASSERT_TRUE(p->engine()->AddRequest("local", head, Greedy(1)).ok());
  RunAll({p->engine()});
  auto params = Prefill(*p, "r", prompt);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("r", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["r"], reference_[1], "P prefix hit, host buffer");
  ExpectPulled(all["r"], 600, TinyPullBytes(64, 0, 600), "P prefix hit, host buffer");
  EXPECT_GT(p->engine()->stats().num_prefix_cache_hit_tokens, 0);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, ManyRequestsShareOneHandshake) {
  // Several requests for the same P arrive together while the handshake is in flight: one
  // handshake, every pull done, every output equal to colocated.
  auto p = MakeInstance("P", {128, "flash", Layout::kHND, false}, Config());
  auto d = MakeInstance("D", {16, "paged", Layout::kNHD, true}, Config());
  ASSERT_TRUE(p && d);
  std::vector<std::vector<int32_t>> prompts;
  std::map<std::string, connector::KvTransferParams> params;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(MakePrompt(100 + 90 * i, 20 + i));
    auto pp = Prefill(*p, "m" + std::to_string(i), prompts.back());
    ASSERT_TRUE(pp.has_value());
    params["m" + std::to_string(i)] = *pp;
  }
  for (int i = 0; i < 4; ++i) {
    const std::string id = "m" + std::to_string(i);
    ASSERT_TRUE(d->engine()->AddRequest(id, prompts[i], Greedy(3), params[id]).ok());
  }
  auto all = RunAll({d->engine(), p->engine()});
  for (int i = 0; i < 4; ++i) {
    const std::string id = "m" + std::to_string(i);
    ExpectSame(all[id], Colocated(prompts[i], Greedy(3)), "request " + std::to_string(i));
    ExpectPulled(all[id], static_cast<int32_t>(prompts[i].size()), 0, id);
  }
  EXPECT_EQ(d->connector()->Stats().handshakes, 1u);
  EXPECT_EQ(d->connector()->Stats().transfers, 4u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, DPrefixHitPullsOnlyTheTail) {
  // D already has the first blocks of the prompt in its prefix cache: only the tail is pulled.
  auto p = MakeInstance("P", {64, "paged", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {128, "flash", Layout::kHND, false}, Config());
  ASSERT_TRUE(p && d);
  const std::vector<int32_t>& prompt = prompts_[1];  // 600 tokens
  // Warm D's prefix cache with the first 300 tokens (2 full logical blocks of 128).
  std::vector<int32_t> head(prompt.begin(), prompt.begin() + 300);
  ASSERT_TRUE(d->engine()->AddRequest("warm", head, Greedy(1)).ok());
  RunAll({d->engine()});
  auto params = Prefill(*p, "r", prompt);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("r", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["r"], reference_[1], "tail pull");
  const connector::ConnectorStats s = d->connector()->Stats();
  EXPECT_EQ(s.transfers, 1u);
  // 600 - 256 = 344 tokens pulled (D resumes after P's first token): P kernel blocks of 64
  // covering [256, 600) = 6 blocks (4..9), per region, in P's geometry (tiny: 4 layers, 2 KV heads,
  // head dim 32, f32).
  const uint64_t bytes_per_kernel_block = 64 * 2 * 32 * 4;
  EXPECT_EQ(s.bytes, 6 * 8 * bytes_per_kernel_block);
  ExpectPulled(all["r"], 344, s.bytes, "tail pull");
  EXPECT_EQ(all["r"].kv_load->local_hit_tokens, 256);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, AbortWhileWaitingForRemoteKv) {
  // D aborts a request whose pull is in flight: its blocks stay allocated until the pull has
  // stopped, P is still notified and frees, and both pools end clean.
  auto p = MakeInstance("P", {128, "flash", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "a", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("a", prompts_[1], Greedy(4), *params).ok());
  d->engine()->Step();  // admitted, waiting for remote KV, handshake in the background
  EXPECT_EQ(d->engine()->stats().num_waiting_for_remote_kv, 1);
  ASSERT_TRUE(d->engine()->Abort("a").ok());
  auto all = RunAll({d->engine(), p->engine()}, 10000);
  EXPECT_TRUE(all["a"].finished);
  EXPECT_EQ(all["a"].reason, engine::FinishReason::kAbort);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, AbortBeforeScheduleNotifiesP) {
  // A D request aborted before it was ever scheduled still tells P to free (no lease wait).
  auto p = MakeInstance("P", {64, "paged", Layout::kHND, true}, Config());
  auto d = MakeInstance("D", {64, "paged", Layout::kHND, true}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "b", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("b", prompts_[1], Greedy(4), *params).ok());
  ASSERT_TRUE(d->engine()->Abort("b").ok());
  RunAll({d->engine(), p->engine()}, 10000);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  EXPECT_EQ(d->connector()->Stats().transfers, 0u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, FullHitOnDOnlyNotifies) {
  // D's prefix cache holds every prompt token (4 blocks of 64; D resumes after P's first token,
  // so it computes none of them): no data is read, P is told to free by notification, and the
  // output is still exact.
  auto p = MakeInstance("P", {128, "flash", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {64, "paged", Layout::kHND, false}, Config());
  ASSERT_TRUE(p && d);
  const std::vector<int32_t> prompt = MakePrompt(256, 31);
  ASSERT_TRUE(d->engine()->AddRequest("warm", prompt, Greedy(2)).ok());
  RunAll({d->engine()});
  auto params = Prefill(*p, "full", prompt);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("full", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["full"], Colocated(prompt, Greedy(4)), "full hit on D");
  ExpectOutcome(all["full"], connector::LoadOutcome::kNotifyOnly, "full hit on D");
  EXPECT_EQ(all["full"].kv_load->local_hit_tokens, 256);
  EXPECT_EQ(all["full"].kv_load->bytes, 0u);
  EXPECT_EQ(d->connector()->Stats().transfers, 0u);
  EXPECT_EQ(d->connector()->Stats().bytes, 0u);
  EXPECT_EQ(d->connector()->Stats().notify_only, 1u);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  EXPECT_EQ(p->connector()->Stats().leases_expired, 0u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, StagingFailureOnPIsWithheldAndRecomputedOnD) {
  // P's copy of its second prefill chunk into the host buffer fails. P offers only the blocks
  // before it; D pulls exactly those, computes the rest, and its output is exact.
  InstanceSpec ps{64, "paged", Layout::kNHD, true};
  ps.max_num_batched_tokens = 200;  // chunks [0, 200), [200, 400), [400, 600)
  auto p = MakeInstance("P", ps, Config());
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  static_cast<connector::internal::FerryConnectorImpl*>(p->connector())->stage_fault_for_test =
      [](const std::string&, int32_t token_begin) { return token_begin == 200; };
  auto params = Prefill(*p, "s", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  EXPECT_EQ(params->remote_num_tokens, 192);  // 3 whole blocks of 64 before token 200
  EXPECT_EQ(params->remote_block_ids.size(), 3u);
  ASSERT_TRUE(d->engine()->AddRequest("s", prompts_[1], Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["s"], reference_[1], "staging failure on P");
  // Only the staged part moved: P kernel blocks 0..2 of 64 tokens; nothing of the failed rest.
  ExpectPulled(all["s"], 192, TinyPullBytes(64, 0, 192), "staging failure on P");
  EXPECT_EQ(p->connector()->Stats().stage_failures, 1u);
  EXPECT_EQ(p->connector()->Stats().blocks_withheld, 7u);  // 10 blocks of 64 for 600 tokens
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, StagingFailureWithPolicyFailFailsOnP) {
  connector::KvTransferConfig pc = Config();
  pc.kv_load_failure_policy = connector::KvLoadFailurePolicy::kFail;
  auto p = MakeInstance("P", {64, "paged", Layout::kNHD, true}, pc);
  ASSERT_TRUE(p);
  static_cast<connector::internal::FerryConnectorImpl*>(p->connector())->stage_fault_for_test =
      [](const std::string&, int32_t) { return true; };
  engine::SamplingParams sp = Greedy(1);
  connector::KvTransferParams in;
  in.do_remote_decode = true;
  ASSERT_TRUE(p->engine()->AddRequest("x", prompts_[1], sp, in).ok());
  auto all = RunAll({p->engine()});
  EXPECT_EQ(all["x"].reason, engine::FinishReason::kError);
  EXPECT_EQ(all["x"].error.code(), StatusCode::kDataLoss) << all["x"].error;
  EXPECT_FALSE(all["x"].kv_transfer_params.has_value());
  EXPECT_EQ(p->connector()->Stats().leases_granted, 0u);
  ExpectPoolClean(*p->engine(), "P");
}

TEST_F(PdEngineTest, SeededSamplingEqualsColocated) {
  engine::SamplingParams sp;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.top_k = 40;
  sp.seed = 1234;
  auto p = MakeInstance("P", {128, "flash", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {32, "paged", Layout::kHND, true}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "seeded", prompts_[1], sp);  // P samples the first token too
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("seeded", prompts_[1], sp, *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["seeded"], Colocated(prompts_[1], sp), "seeded sampling");
  ExpectPulled(all["seeded"], 600, TinyPullBytes(64, 0, 600), "seeded sampling");
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, KvDtypesF16AndBf16) {
  for (kv::DType dtype : {kv::DType::kF16, kv::DType::kBF16}) {
    SCOPED_TRACE(std::string(kv::DTypeName(dtype)));
    InstanceSpec ps{128, "flash", Layout::kNHD, false}, ds{32, "paged", Layout::kHND, true};
    ps.dtype = ds.dtype = dtype;
    const std::vector<Completion> reference = {Colocated(prompts_[0], Greedy(4), dtype),
                                               Colocated(prompts_[1], Greedy(4), dtype)};
    RunPair({ps, ds}, prompts_, reference, Greedy(4));
    // The KV dtype matters: f32 storage gives other logprobs (so the comparison above is real).
    EXPECT_NE(reference[1].logprobs, reference_[1].logprobs);
  }
}

TEST_F(PdEngineTest, DifferentKvDtypesAreRefusedAtTheHandshake) {
  // P stores f16, D f32: kvferry refuses rather than converting (docs/connector.md). D
  // recomputes, exactly, and the failure says which field differs.
  InstanceSpec ps{64, "paged", Layout::kNHD, false};
  ps.dtype = kv::DType::kF16;
  auto p = MakeInstance("P", ps, Config(300));
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "dt", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  // P's first token comes from P's f16 cache, so D is given the params without it (vLLM's
  // form) to show that its own recompute is exact; a first token is P's, like its KV.
  params->first_token.reset();
  ASSERT_TRUE(d->engine()->AddRequest("dt", prompts_[1], Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["dt"], reference_[1], "f16 P, f32 D");
  ExpectOutcome(all["dt"], connector::LoadOutcome::kFailedHandshake, "f16 P, f32 D");
  EXPECT_EQ(d->connector()->Stats().bytes, 0u);
  ExpectPoolClean(*d->engine(), "D");
  RunAll({p->engine()});  // P's lease runs out (no reader)
  ExpectPoolClean(*p->engine(), "P");
}

TEST_F(PdEngineTest, PreemptionOnDDuringAndAfterPulls) {
  // D's pool is too small for both requests to finish together: one running request is
  // preempted while the other's pull is in flight, and a pulled request is preempted after its
  // pull while decoding (then recomputed from its prefix cache). Outputs stay exact.
  InstanceSpec ds{16, "paged", Layout::kNHD, false};
  ds.num_kv_blocks = 42;  // 2 x 300-token prompts = 38 blocks; decoding 40 more each needs 44
  auto p = MakeInstance("P", {64, "paged", Layout::kHND, false}, Config());
  auto d = MakeInstance("D", ds, Config());
  ASSERT_TRUE(p && d);
  const std::vector<int32_t> a = MakePrompt(300, 41), b = MakePrompt(300, 42);
  auto pa = Prefill(*p, "a", a);
  auto pb = Prefill(*p, "b", b);
  ASSERT_TRUE(pa.has_value() && pb.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("a", a, Greedy(40), *pa).ok());
  ASSERT_TRUE(d->engine()->AddRequest("b", b, Greedy(40), *pb).ok());
  auto all = RunAll({d->engine(), p->engine()}, 60000);
  ExpectSame(all["a"], Colocated(a, Greedy(40)), "a");
  ExpectSame(all["b"], Colocated(b, Greedy(40)), "b");
  ExpectPulled(all["a"], 300, 0, "a");
  ExpectPulled(all["b"], 300, 0, "b");
  EXPECT_GT(d->engine()->stats().num_preemptions, 0);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

// ---- failures: one named test per kind; D recomputes and still matches colocated ----

struct FailureRun {
  std::unique_ptr<Instance> p, d;
  Completion out;
};

// Runs the hand-off with `before_pull` applied after P's prefill; D gets `d_config`.
FailureRun RunWithFailure(const std::vector<int32_t>& prompt, connector::KvTransferConfig p_config,
                          connector::KvTransferConfig d_config, engine::KvLoadFailurePolicy policy,
                          const std::function<void(FailureRun&)>& before_pull) {
  FailureRun run;
  p_config.backend = transfer::BackendKind::kLoopback;
  d_config.backend = transfer::BackendKind::kLoopback;
  // P is never notified after most failures: a short lease keeps the test short.
  if (p_config.lease_ms == connector::KvTransferConfig{}.lease_ms) p_config.lease_ms = 300;
  // P's pool holds exactly one 600-token prompt, so a second prompt reuses the same blocks.
  run.p = MakeInstance("P", {128, "flash", Layout::kNHD, false, 5}, p_config);
  d_config.kv_load_failure_policy = policy;
  run.d = MakeInstance("D", {64, "paged", Layout::kHND, false}, d_config);
  if (!run.p || !run.d) return run;
  auto params = Prefill(*run.p, "f", prompt);
  EXPECT_TRUE(params.has_value());
  if (!params) return run;
  if (before_pull) before_pull(run);
  EXPECT_TRUE(run.d->engine()->AddRequest("f", prompt, Greedy(4), *params).ok());
  run.out = RunAll({run.d->engine(), run.p->engine()})["f"];
  return run;
}

// D's logical blocks as the engine allocated them for a fresh request on a fresh pool: the
// failure report must name exactly the blocks of the pulled range, all of them.
void ExpectReportedAllBlocks(const FailureRun& run, size_t prompt_len) {
  const size_t d_blocks = (prompt_len + 63) / 64;
  std::set<int32_t> ids;
  for (kv::LogicalBlockId id : run.d->worker->invalid) ids.insert(id.value());
  EXPECT_EQ(run.d->worker->invalid.size(), d_blocks);
  EXPECT_EQ(ids.size(), d_blocks);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, run.d->engine()->stats().num_blocks_total);
  }
}

TEST_F(PdEngineTest, HandshakeFails) {
  FailureRun run = RunWithFailure(prompts_[1], Config(0, "p-secret"), Config(0, "wrong"),
                                  engine::KvLoadFailurePolicy::kRecompute, nullptr);
  ASSERT_TRUE(run.out.finished);
  ExpectSame(run.out, reference_[1], "recomputed after a handshake failure");
  ExpectOutcome(run.out, connector::LoadOutcome::kFailedHandshake,
                "recomputed after a handshake failure");
  ExpectReportedAllBlocks(run, prompts_[1].size());
  EXPECT_EQ(run.d->connector()->Stats().failures_handshake, 1u);
  EXPECT_EQ(run.p->connector()->Stats().leases_expired, 1u);
  ExpectPoolClean(*run.d->engine(), "D");
  ExpectPoolClean(*run.p->engine(), "P");
}

TEST_F(PdEngineTest, TransferFails) {
  FailureRun run = RunWithFailure(
      prompts_[1], Config(), Config(), engine::KvLoadFailurePolicy::kRecompute, [](FailureRun& r) {
        ASSERT_TRUE(transfer::loopback::InjectFault(r.d->config.engine_id,
                                                    transfer::loopback::Fault::kFailNext)
                        .ok());
      });
  ASSERT_TRUE(run.out.finished);
  ExpectSame(run.out, reference_[1], "recomputed after a transfer failure");
  ExpectOutcome(run.out, connector::LoadOutcome::kFailedTransfer,
                "recomputed after a transfer failure");
  ExpectReportedAllBlocks(run, prompts_[1].size());
  EXPECT_EQ(run.d->connector()->Stats().failures_transfer, 1u);
  ExpectPoolClean(*run.d->engine(), "D");
  ExpectPoolClean(*run.p->engine(), "P");
}

TEST_F(PdEngineTest, TransferDeadline) {
  FailureRun run =
      RunWithFailure(prompts_[1], Config(), Config(0, "", 200),
                     engine::KvLoadFailurePolicy::kRecompute, [](FailureRun& r) {
                       ASSERT_TRUE(transfer::loopback::InjectFault(
                                       r.d->config.engine_id, transfer::loopback::Fault::kStallNext)
                                       .ok());
                     });
  ASSERT_TRUE(run.out.finished);
  ExpectSame(run.out, reference_[1], "recomputed after a transfer deadline");
  ExpectOutcome(run.out, connector::LoadOutcome::kFailedDeadline,
                "recomputed after a transfer deadline");
  ExpectReportedAllBlocks(run, prompts_[1].size());
  EXPECT_EQ(run.d->connector()->Stats().failures_deadline, 1u);
  ExpectPoolClean(*run.d->engine(), "D");
  ExpectPoolClean(*run.p->engine(), "P");
}

TEST_F(PdEngineTest, LeaseExpiresDuringRead) {
  // P's lease runs out while D's read is not yet confirmed; P frees the blocks and reuses them
  // for another prompt before D checks. D must detect it and recompute.
  std::vector<int32_t> other = MakePrompt(600, 9);
  FailureRun run = RunWithFailure(
      prompts_[1], Config(100), Config(), engine::KvLoadFailurePolicy::kRecompute,
      [&other](FailureRun& r) {
        auto* impl = static_cast<connector::internal::FerryConnectorImpl*>(r.d->connector());
        Instance* p = r.p.get();
        impl->after_data_read_for_test = [p, &other](const std::string&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          // P notices the lease ran out, frees, and prefills another prompt into the same
          // blocks (P's pool has room for one prompt only).
          auto params = Prefill(*p, "other", other);
          EXPECT_TRUE(params.has_value());
        };
      });
  ASSERT_TRUE(run.out.finished);
  ExpectSame(run.out, reference_[1], "recomputed after the lease ran out");
  ExpectOutcome(run.out, connector::LoadOutcome::kFailedGeneration,
                "recomputed after the lease ran out");
  ExpectReportedAllBlocks(run, prompts_[1].size());
  EXPECT_EQ(run.d->connector()->Stats().failures_generation, 1u);
  EXPECT_GE(run.p->connector()->Stats().leases_expired, 1u);
  ExpectPoolClean(*run.d->engine(), "D");
  // "other" is still held by P for a reader that never comes; let its lease run out too.
  RunAll({run.p->engine()});
  ExpectPoolClean(*run.p->engine(), "P");
}

TEST_F(PdEngineTest, FailPolicyFailsTheRequest) {
  FailureRun run = RunWithFailure(
      prompts_[1], Config(), Config(), engine::KvLoadFailurePolicy::kFail, [](FailureRun& r) {
        ASSERT_TRUE(transfer::loopback::InjectFault(r.d->config.engine_id,
                                                    transfer::loopback::Fault::kFailNext)
                        .ok());
      });
  ASSERT_TRUE(run.out.finished);
  EXPECT_EQ(run.out.reason, engine::FinishReason::kError);
  EXPECT_FALSE(run.out.error.ok());
  ExpectReportedAllBlocks(run, prompts_[1].size());
  ExpectPoolClean(*run.d->engine(), "D");
  ExpectPoolClean(*run.p->engine(), "P");
}

// ---- resuming from P's first token ----

TEST_F(PdEngineTest, WithoutFirstTokenDPullsAllButTheLastPromptToken) {
  // Params without P's first token (vLLM's P): D computes the last prompt token itself.
  auto p = MakeInstance("P", {128, "flash", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {32, "paged", Layout::kHND, false}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "old", prompts_[1]);
  ASSERT_TRUE(params.has_value() && params->first_token.has_value());
  params->first_token.reset();
  ASSERT_TRUE(d->engine()->AddRequest("old", prompts_[1], Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["old"], reference_[1], "without first token");
  ExpectPulled(all["old"], 599, TinyPullBytes(64, 0, 599), "without first token");
  EXPECT_EQ(all["old"].num_cached_tokens, 599);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, FirstTokenCarriesWhatColocatedReports) {
  // P's first token is the colocated first token, its logprob bit for bit, and the seed.
  engine::SamplingParams sp;
  sp.max_tokens = 4;
  sp.temperature = 0.7f;
  sp.seed = 99;
  sp.ignore_eos = true;
  sp.top_logprobs = 3;
  auto p = MakeInstance("P", {64, "paged", Layout::kNHD, false}, Config(300));
  ASSERT_TRUE(p);
  auto params = Prefill(*p, "ft", prompts_[1], sp);
  ASSERT_TRUE(params.has_value() && params->first_token.has_value());
  const Completion ref = Colocated(prompts_[1], sp);
  EXPECT_EQ(params->first_token->token_id, ref.tokens[0]);
  EXPECT_EQ(0, std::memcmp(&params->first_token->logprob, &ref.logprobs[0], sizeof(float)));
  EXPECT_EQ(params->first_token->sampling_seed, 99u);
  EXPECT_EQ(params->first_token->top_logprobs.size(), 3u);
  EXPECT_EQ(params->remote_num_tokens, 600);  // every prompt token offered
  RunAll({p->engine()});                      // nobody reads: the lease runs out
  ExpectPoolClean(*p->engine(), "P");
}

TEST_F(PdEngineTest, FirstTokenThatEndsTheRequestHoldsNothingOnP) {
  // P's first token is a stop token: the request is over, P's answer is the whole answer, and
  // P leases nothing (no D will come).
  const Completion ref = Colocated(prompts_[1], Greedy(4));
  engine::SamplingParams sp = Greedy(4);
  sp.stop_token_ids = {ref.tokens[0]};
  auto p = MakeInstance("P", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p);
  auto params = Prefill(*p, "stop", prompts_[1], sp);
  ASSERT_TRUE(params.has_value() && params->first_token.has_value());
  EXPECT_EQ(params->first_token->token_id, ref.tokens[0]);
  EXPECT_TRUE(params->remote_block_ids.empty());
  EXPECT_EQ(p->connector()->Stats().leases_granted, 0u);
  EXPECT_FALSE(p->engine()->HasWork());
  ExpectPoolClean(*p->engine(), "P");
}

TEST_F(PdEngineTest, DGivenAFinalFirstTokenFinishesAtOnceAndReleasesP) {
  // A D asked for one token gets it from P: it finishes when it takes the request, reads
  // nothing, and tells P to free its lease.
  auto p = MakeInstance("P", {64, "paged", Layout::kNHD, false}, Config());
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "one", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("one", prompts_[1], Greedy(1), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["one"], Colocated(prompts_[1], Greedy(1)), "one token");
  EXPECT_EQ(all["one"].reason, engine::FinishReason::kLength);
  EXPECT_EQ(d->connector()->Stats().transfers, 0u);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  EXPECT_EQ(p->connector()->Stats().leases_expired, 0u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

TEST_F(PdEngineTest, FirstTokenOutsideTheVocabularyIsRefused) {
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(d);
  connector::KvTransferParams params;
  params.do_remote_prefill = true;
  params.first_token = connector::FirstToken{1 << 20, -1.0f, {}, 1};
  const Status s = d->engine()->AddRequest("bad", prompts_[0], Greedy(4), params);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("first_token_id"), std::string_view::npos) << s;
}

}  // namespace
}  // namespace kvferry::pd_test
