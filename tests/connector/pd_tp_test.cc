// P/D across tensor-parallel sizes (docs/connector.md, "Rank mapping"): P at TP a, D at TP b,
// for a, b in {1, 2, 4}, on `tiny` (2 KV heads: replicated at TP 4) and `tiny-kv4` (4 KV
// heads: one per rank at TP 4), over NHD/HND x host buffer on/off x logical blocks 16 and 128
// on `flash` (kernel 16 and 64) on each side. D's output must equal colocated TP-1 output bit
// for bit; each D rank must have read exactly its heads' bytes from the P ranks holding them
// (the first copy of a replicated head), in the coalesced number of descriptors; every P rank
// must release on D's notifications; both pools end clean.
//
// The default run takes a sample covering every TP pair of both models (36 instance pairs);
// KVFERRY_PD_TP_FULL_MATRIX=1 (ctest: connector_pd_tp_full, label long) runs all 1152. Then a P
// rank unreachable or hung during the pull: exactly the pulled blocks recomputed, exact output,
// P's lease released on every rank, nothing left held.
#include <gtest/gtest.h>

#include <cstdlib>

#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/kv/attention_backend.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/head_sharding.h"
#include "kvferry/transfer/agent.h"
#include "kvferry/transfer/loopback.h"
#include "pd_harness.h"

namespace kvferry::pd_test {
namespace {

using kv::Layout;

kv::HeadSharding Sharding(const std::string& model, int32_t tp) {
  const engine::ModelConfig m = engine::BuiltinModelConfig(model).value();
  return kv::HeadSharding::Create(m.num_kv_heads, tp).value();
}

// The coalesced descriptor count of D rank `d`'s reads, derived from the layouts alone: a
// read of n heads is whole blocks when n is all of P's heads and (if it lands directly in D's
// cache) all of D's — then runs of kernel blocks consecutive on both sides are one descriptor —
// else one descriptor per kernel block in HND and per token in NHD.
uint64_t ExpectedDescriptors(const Instance& p, const InstanceSpec& ps, const Instance& d,
                             const InstanceSpec& ds, const connector::KvTransferParams& params,
                             const connector::LoadSpec& load, int32_t d_rank) {
  const int32_t kp = p.engine()->block_size_kernel(), kd = d.engine()->block_size_kernel();
  const int32_t lp = ps.block_size, ld = ds.block_size;
  const int64_t begin = load.num_local_computed_tokens;
  const int64_t end = begin + load.num_external_tokens;
  const bool direct = !ds.host_buffer && ps.layout == ds.layout && kp == kd && begin % kp == 0;
  const kv::HeadSharding psh = Sharding(ps.model, ps.tp), dsh = Sharding(ds.model, ds.tp);
  const int32_t regions = 2 * engine::BuiltinModelConfig(ps.model).value().num_layers;
  uint64_t total = 0;
  const std::vector<kv::HeadRead> reads = kv::PlanHeadReads(psh, dsh, d_rank).value();
  for (const kv::HeadRead& read : reads) {
    const bool whole =
        read.num_heads == psh.HeadsPerRank() && (!direct || read.num_heads == dsh.HeadsPerRank());
    uint64_t pieces = 0;
    int64_t prev_p = -2, prev_l = -2;
    for (int64_t c = begin / kp; c < (end + kp - 1) / kp; ++c) {
      if (!whole) {
        pieces += ps.layout == Layout::kNHD ? kp : 1;
        continue;
      }
      const int64_t t = c * kp;
      const int64_t pk = int64_t{params.remote_block_ids[t / lp].value()} * (lp / kp) + t % lp / kp;
      const int64_t lk =
          direct ? int64_t{load.local_block_ids[t / ld].value()} * (ld / kd) + t % ld / kd
                 : c - begin / kp;
      if (pk != prev_p + 1 || lk != prev_l + 1) ++pieces;
      prev_p = pk;
      prev_l = lk;
    }
    total += pieces * regions;
  }
  return total;
}

// One P/D pair over the prompts, checked as the header says.
void RunTpPair(const InstanceSpec& ps, const InstanceSpec& ds,
               const std::vector<std::vector<int32_t>>& prompts,
               const std::vector<Completion>& reference) {
  SCOPED_TRACE("P " + Describe(ps) + "  D " + Describe(ds));
  auto p = MakeInstance("P", ps, Config());
  auto d = MakeInstance("D", ds, Config());
  ASSERT_TRUE(p && d);
  uint64_t reads = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "req" + std::to_string(i);
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    auto params = Prefill(*p, id, prompts[i]);
    ASSERT_TRUE(params.has_value());
    EXPECT_EQ(params->tp_size, ps.tp);
    ASSERT_TRUE(d->engine()->AddRequest(id, prompts[i], Greedy(4), *params).ok());
    auto all = RunAll({d->engine(), p->engine()});
    ASSERT_TRUE(all[id].finished);
    ExpectSame(all[id], reference[i], "prompt " + std::to_string(n));
    const uint64_t rank_bytes =
        RankPullBytes(ds.model, ds.tp, p->engine()->block_size_kernel(), 0, n);
    // D resumes after P's first token: every prompt token's KV was read.
    ExpectPulled(all[id], n, rank_bytes * ds.tp, "prompt " + std::to_string(n));
    ASSERT_TRUE(all[id].kv_load.has_value());
    const connector::LoadReport& report = *all[id].kv_load;
    ASSERT_EQ(report.ranks.size(), static_cast<size_t>(ds.tp));
    ASSERT_EQ(d->worker->loads.size(), i + 1);
    for (int32_t r = 0; r < ds.tp; ++r) {
      SCOPED_TRACE("D rank " + std::to_string(r));
      const connector::RankLoad& rank = report.ranks[r];
      EXPECT_EQ(rank.bytes, rank_bytes);
      std::vector<int32_t> sources;
      const std::vector<kv::HeadRead> head_reads =
          kv::PlanHeadReads(Sharding(ps.model, ps.tp), Sharding(ds.model, ds.tp), r).value();
      for (const kv::HeadRead& read : head_reads) sources.push_back(read.src_rank);
      EXPECT_EQ(rank.source_ranks, sources);
      reads += sources.size();
      EXPECT_EQ(rank.descriptors,
                ExpectedDescriptors(*p, ps, *d, ds, *params, d->worker->loads[i], r));
    }
  }
  EXPECT_TRUE(d->worker->invalid.empty());
  EXPECT_EQ(d->connector()->Stats().transfers, prompts.size());
  EXPECT_EQ(d->connector()->Stats().notifications_sent, reads);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, prompts.size());
  EXPECT_EQ(p->connector()->Stats().leases_expired, 0u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

// Logical 16 and 128 on flash (kernel 16 and 64) x NHD/HND x host buffer off/on.
std::vector<InstanceSpec> SideSpecs(const std::string& model, int32_t tp) {
  std::vector<InstanceSpec> out;
  for (int32_t bs : {16, 128})
    for (Layout layout : {Layout::kNHD, Layout::kHND})
      for (bool host : {false, true}) {
        InstanceSpec s{bs, "flash", layout, host};
        s.tp = tp;
        s.model = model;
        s.num_kv_blocks = 2048 / bs + 8;
        out.push_back(s);
      }
  return out;
}

TEST(PdTpTest, HeterogeneousTpMatrix) {
  const bool full = std::getenv("KVFERRY_PD_TP_FULL_MATRIX") != nullptr;
  const std::vector<std::vector<int32_t>> prompts = {MakePrompt(5, 1), MakePrompt(600, 2)};
  int k = 0;
  for (const std::string model : {"tiny", "tiny-kv4"}) {
    std::vector<Completion> reference;
    for (const auto& prompt : prompts) {
      reference.push_back(Colocated(prompt, Greedy(4), kv::DType::kF32, model));
    }
    for (int32_t a : {1, 2, 4}) {
      for (int32_t b : {1, 2, 4}) {
        const auto ps = SideSpecs(model, a), ds = SideSpecs(model, b);
        std::vector<std::pair<size_t, size_t>> pairs = {{(k * 3) % 8, (k * 5 + 1) % 8},
                                                        {(k * 3 + 5) % 8, (k * 5 + 6) % 8}};
        if (full) {
          pairs.clear();
          for (size_t i = 0; i < 8; ++i)
            for (size_t j = 0; j < 8; ++j) pairs.push_back({i, j});
        }
        ++k;
        for (auto [i, j] : pairs) {
          RunTpPair(ps[i], ds[j], prompts, reference);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Each P rank's share of the lease ends only when every D rank reading from it has notified:
// P at TP 2 (tiny: one KV head per rank) serving a D at TP 4, where D ranks 0-1 read P rank 0
// and D ranks 2-3 read P rank 1. Notifications are sent by hand from stand-in agents, one per D
// rank as a D has; a rank that notifies twice counts once.
TEST(PdTpTest, PRankReleasesAfterAllItsReaders) {
  InstanceSpec ps;
  ps.tp = 2;
  auto p = MakeInstance("P", ps, Config(60000));
  ASSERT_TRUE(p);
  auto params = Prefill(*p, "f", MakePrompt(40, 3));
  ASSERT_TRUE(params.has_value());
  const std::string hash = connector::internal::CompatibilityHash("tiny", [] {
    kv::CacheSpec s;
    s.num_layers = 4;
    s.num_kv_heads = 2;
    s.head_dim = 32;
    return s;
  }());
  auto reply = connector::internal::FetchOverSideChannel(
      "127.0.0.1", p->connector()->side_channel_port(),
      connector::internal::EncodeHandshakeRequest(0, ""), Deadline::AfterMs(3000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto ranks = connector::internal::DecodeHandshakeReply(*reply, hash);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 2u);
  std::vector<std::unique_ptr<transfer::Agent>> d;  // D rank r reads P rank r / 2
  std::vector<transfer::PeerHandle> to;
  for (int r = 0; r < 4; ++r) {
    transfer::AgentOptions d_options;
    d_options.name = "stand-in-d.tp" + std::to_string(r);
    d_options.backend = transfer::BackendKind::kLoopback;
    auto a = transfer::Agent::Create(d_options);
    ASSERT_TRUE(a.ok()) << a.status();
    d.push_back(std::move(*a));
    to.push_back(d[r]->LoadRemoteMetadata((*ranks)[r / 2].agent_metadata).value());
  }
  const std::string note = connector::internal::EncodePullNotification("f", 4);
  auto step_p = [&] {
    for (int i = 0; i < 3; ++i) p->engine()->Step();
    return p->connector()->Stats().blocks_held;
  };
  ASSERT_GT(step_p(), 0);
  ASSERT_TRUE(d[0]->SendNotification(to[0], note).ok());
  ASSERT_TRUE(d[1]->SendNotification(to[1], note).ok());
  ASSERT_TRUE(d[2]->SendNotification(to[2], note).ok());
  ASSERT_TRUE(d[2]->SendNotification(to[2], note).ok());
  EXPECT_GT(step_p(), 0) << "P rank 1 has heard from one of its two readers only";
  EXPECT_EQ(p->connector()->Stats().notifications_duplicate, 1u);
  ASSERT_TRUE(d[3]->SendNotification(to[3], note).ok());
  EXPECT_EQ(step_p(), 0);
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
  ExpectPoolClean(*p->engine(), "P");
}

// kv_transfer_params naming another TP size than P's handshake: refused, recomputed exactly.
TEST(PdTpTest, TpSizeMismatchIsAHandshakeFailure) {
  const std::vector<int32_t> prompt = MakePrompt(100, 4);
  InstanceSpec ps;
  ps.tp = 2;
  auto p = MakeInstance("P", ps, Config(60000));
  auto d = MakeInstance("D", InstanceSpec{}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "f", prompt);
  ASSERT_TRUE(params.has_value());
  params->tp_size = 4;
  ASSERT_TRUE(d->engine()->AddRequest("f", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine()});
  ASSERT_TRUE(all["f"].finished);
  ExpectSame(all["f"], Colocated(prompt, Greedy(4)), "recomputed");
  ExpectOutcome(all["f"], connector::LoadOutcome::kFailedHandshake, "tp_size mismatch");
  ExpectPoolClean(*d->engine(), "D");
}

// A P rank unreachable (its transfers fail) or hung (they run past transfer_timeout_ms) during
// the pull: the load fails as a whole, exactly the D blocks of the pulled range are reported
// invalid and recomputed (exact output), P's lease ends on every rank — the failed rank's part
// by D's side-channel release, long before the lease would expire — and nothing stays held.
struct FaultCase {
  int32_t p_tp, d_tp;
  transfer::loopback::Fault fault;
  connector::LoadOutcome outcome;
};

class PdTpFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(PdTpFaultTest, PRankFailsDuringPull) {
  const FaultCase& c = GetParam();
  const std::vector<int32_t> prompt = MakePrompt(300, 7);
  const Completion reference = Colocated(prompt, Greedy(4), kv::DType::kF32, "tiny-kv4");
  InstanceSpec ps{128, "flash", Layout::kNHD, false}, ds{16, "flash", Layout::kHND, false};
  ps.model = ds.model = "tiny-kv4";
  ps.tp = c.p_tp;
  ds.tp = c.d_tp;
  auto p = MakeInstance("P", ps, Config(/*lease_ms=*/60000));
  auto d = MakeInstance("D", ds, Config(0, "", /*transfer_timeout_ms=*/300));
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "f", prompt);
  ASSERT_TRUE(params.has_value());
  // P's last rank fails; its other ranks keep answering.
  ASSERT_TRUE(
      transfer::loopback::InjectTargetFault(p->connector()->AgentName(c.p_tp - 1), c.fault).ok());
  ASSERT_TRUE(d->engine()->AddRequest("f", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ASSERT_TRUE(all["f"].finished);
  ExpectSame(all["f"], reference, "recomputed");
  ExpectOutcome(all["f"], c.outcome, "recomputed");
  // Exactly D's logical blocks of the pulled range [0, 300): 19 blocks of 16.
  ASSERT_EQ(d->worker->loads.size(), 1u);
  const auto& local = d->worker->loads[0].local_block_ids;
  EXPECT_EQ(d->worker->invalid, std::vector<kv::LogicalBlockId>(local.begin(), local.begin() + 19));
  const connector::ConnectorStats ds_stats = d->connector()->Stats();
  EXPECT_EQ(ds_stats.failures_transfer + ds_stats.failures_deadline, 1u);
  EXPECT_EQ(ds_stats.transfers, 0u);
  // Every P rank let go: by notification or by D's release, not by expiry.
  const connector::ConnectorStats p_stats = p->connector()->Stats();
  EXPECT_EQ(p_stats.leases_released_by_notification, 1u);
  EXPECT_EQ(p_stats.leases_expired, 0u);
  EXPECT_EQ(p_stats.blocks_held, 0);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

INSTANTIATE_TEST_SUITE_P(Ranks, PdTpFaultTest,
                         ::testing::Values(FaultCase{2, 1, transfer::loopback::Fault::kFailNext,
                                                     connector::LoadOutcome::kFailedTransfer},
                                           FaultCase{2, 2, transfer::loopback::Fault::kFailNext,
                                                     connector::LoadOutcome::kFailedTransfer},
                                           FaultCase{4, 2, transfer::loopback::Fault::kStallNext,
                                                     connector::LoadOutcome::kFailedDeadline},
                                           FaultCase{2, 4, transfer::loopback::Fault::kStallNext,
                                                     connector::LoadOutcome::kFailedDeadline}),
                         [](const auto& info) {
                           return "P" + std::to_string(info.param.p_tp) + "_D" +
                                  std::to_string(info.param.d_tp) +
                                  (info.param.fault == transfer::loopback::Fault::kFailNext
                                       ? "_unreachable"
                                       : "_hung");
                         });

// Policy `fail`: the request fails instead, and still nothing is held on either side.
TEST(PdTpFaultPolicyTest, FailPolicyFailsAndReleases) {
  const std::vector<int32_t> prompt = MakePrompt(100, 8);
  InstanceSpec ps{16, "flash", Layout::kHND, false}, ds{16, "flash", Layout::kHND, false};
  ps.tp = 2;
  auto p = MakeInstance("P", ps, Config(60000));
  connector::KvTransferConfig dc = Config();
  dc.kv_load_failure_policy = connector::KvLoadFailurePolicy::kFail;
  auto d = MakeInstance("D", ds, dc);
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "f", prompt);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(transfer::loopback::InjectTargetFault(p->connector()->AgentName(0),
                                                    transfer::loopback::Fault::kFailNext)
                  .ok());
  ASSERT_TRUE(d->engine()->AddRequest("f", prompt, Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ASSERT_TRUE(all["f"].finished);
  EXPECT_EQ(all["f"].reason, engine::FinishReason::kError);
  EXPECT_EQ(p->connector()->Stats().leases_expired, 0u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

}  // namespace
}  // namespace kvferry::pd_test
