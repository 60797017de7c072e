// Split engines: an engine whose tensor-parallel ranks each run their own FerryConnector (one
// process per rank, as vLLM's TP workers), beside engines whose ranks share one. P at TP a and
// D at TP b, either split or whole, over the loopback backend with the scheduler outside the
// connector (holds and loads from metadata, as kvferry.vllm drives it): every D rank ends up
// with exactly its heads' bytes, every P rank's lease ends on its readers' notifications, a
// release reaches every rank of a split P, and a P rank missing at its port fails the
// handshake (D recomputes) instead of reading anything.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include "kvferry/common/deadline.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/connector/lease_table.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/head_sharding.h"

namespace kvferry::connector::split_test {
namespace {

using kv::Layout;
using kv::LogicalBlockId;

constexpr int32_t kHeads = 4;  // the model's KV heads, unless a test says otherwise
constexpr int32_t kBlocks = 64;

uint32_t Pattern(uint32_t salt, int32_t region, int64_t token, int32_t head, int32_t e) {
  return (salt << 28) ^ (static_cast<uint32_t>(region) << 22) ^
         (static_cast<uint32_t>(token) << 6) ^ (static_cast<uint32_t>(head) << 3) ^
         static_cast<uint32_t>(e);
}

std::vector<LogicalBlockId> Ids(std::vector<int32_t> v) {
  std::vector<LogicalBlockId> out;
  for (int32_t x : v) out.emplace_back(x);
  return out;
}

struct EngineSpec {
  int32_t tp = 1;
  bool split = false;  // one connector per rank (else one for all ranks)
  int32_t block_size = 16;
  Layout layout = Layout::kNHD;
};

std::string Describe(const EngineSpec& s) {
  return "tp" + std::to_string(s.tp) + (s.split ? " split" : " whole") + " block " +
         std::to_string(s.block_size) + " " + std::string(kv::LayoutName(s.layout));
}

// One engine: its ranks' caches and the connectors that hold them.
struct Engine {
  EngineSpec spec;
  std::string engine_id;
  int32_t base_port = 0;
  kv::HeadSharding sharding;
  std::optional<kv::BlockGeometry> geometry;
  std::vector<std::unique_ptr<kv::KvCache>> caches;    // per engine rank
  std::vector<std::unique_ptr<FerryConnector>> conns;  // per rank (split) or one
  FerryConnector& ConnOf(int32_t rank) { return *conns[spec.split ? rank : 0]; }

  // Rank r's side channel on base_port + r (split), the engine's on base_port (whole);
  // `moved_rank` serves 7 ports further instead.
  static StatusOr<std::unique_ptr<Engine>> Make(const std::string& name, const EngineSpec& spec,
                                                int32_t base_port, int32_t moved_rank,
                                                int32_t heads) {
    static int counter = 0;
    auto e = std::make_unique<Engine>();
    e->spec = spec;
    e->engine_id = name + "-" + std::to_string(++counter);
    e->base_port = base_port;
    KVF_ASSIGN_OR_RETURN(e->sharding, kv::HeadSharding::Create(heads, spec.tp));
    KVF_ASSIGN_OR_RETURN(e->geometry, kv::BlockGeometry::Create(spec.block_size, spec.block_size));
    for (int32_t r = 0; r < spec.tp; ++r) {
      kv::CacheSpec cs;
      cs.num_layers = 2;
      cs.num_kv_heads = e->sharding.HeadsPerRank();
      cs.head_dim = 4;
      cs.dtype = kv::DType::kF32;
      cs.layout = spec.layout;
      cs.block_size_kernel = spec.block_size;
      cs.num_blocks_kernel = kBlocks;
      KVF_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvCache> cache, kv::KvCache::Allocate(cs));
      e->caches.push_back(std::move(cache));
    }
    const int32_t conns = spec.split ? spec.tp : 1;
    for (int32_t c = 0; c < conns; ++c) {
      KvTransferConfig config;
      config.kv_connector = "FerryConnector";
      config.backend = transfer::BackendKind::kLoopback;
      config.engine_id = e->engine_id;
      config.side_channel_port = base_port + c + (c == moved_rank ? 7 : 0);
      config.handshake_timeout_ms = 1500;
      FerryConnectorOptions options{.model_name = "split-model",
                                    .tp_size = spec.split ? 1 : spec.tp,
                                    .first_rank = c,
                                    .engine_tp_size = spec.tp,
                                    .external_scheduler = true};
      KVF_ASSIGN_OR_RETURN(std::unique_ptr<FerryConnector> conn,
                           CreateFerryConnector(config, options));
      std::vector<kv::KvCache*> mine;
      for (int32_t r = 0; r < spec.tp; ++r) {
        if (!spec.split || r == c) mine.push_back(e->caches[r].get());
      }
      KVF_RETURN_IF_ERROR(conn->worker()->RegisterKvCaches(mine, e->sharding, spec.block_size));
      e->conns.push_back(std::move(conn));
    }
    return e;
  }

  uint32_t* Slot(int32_t rank, int32_t region, std::span<const LogicalBlockId> ids, int64_t t,
                 int32_t local_head) {
    auto slot = geometry->KernelSlotOfToken(ids, t);
    EXPECT_TRUE(slot.ok());
    kv::KvCache& c = *caches[rank];
    return reinterpret_cast<uint32_t*>(c.region(region).base) +
           c.spec().ElementOffset(slot->block, slot->token_in_block, local_head);
  }
  // Every rank's heads of tokens [0, n) in `ids` hold `salt`'s pattern (by global head); with
  // `check`, compares instead and returns whether all match.
  bool Paint(uint32_t salt, std::span<const LogicalBlockId> ids, int64_t n, bool check) {
    for (int32_t r = 0; r < spec.tp; ++r)
      for (int32_t region = 0; region < caches[r]->num_regions(); ++region)
        for (int64_t t = 0; t < n; ++t)
          for (int32_t h = 0; h < sharding.HeadsPerRank(); ++h)
            for (int32_t e = 0; e < 4; ++e) {
              uint32_t* v = Slot(r, region, ids, t, h);
              const uint32_t want = Pattern(salt, region, t, sharding.FirstHead(r) + h, e);
              if (!check) {
                v[e] = want;
              } else if (v[e] != want) {
                ADD_FAILURE() << "rank " << r << " region " << region << " token " << t << " head "
                              << h;
                return false;
              }
            }
    return true;
  }
  void Bind(const ConnectorMetadata& meta) {
    for (auto& c : conns) c->worker()->BindMetadata(meta);
  }
};

// A base port with `n` free ports above it for this process's engines.
int32_t PortsFor(int32_t n) {
  static int32_t next = 20000 + static_cast<int32_t>(::getpid() % 2000) * 16;
  const int32_t base = next;
  next += n + 8;
  return base;
}

struct Pair {
  std::unique_ptr<Engine> p;
  std::unique_ptr<Engine> d;
  // The outside scheduler's mirror of P's lease tables.
  std::unique_ptr<LeaseTable> mirror = std::make_unique<LeaseTable>(kBlocks);

  static Pair Make(const EngineSpec& ps, const EngineSpec& ds, int32_t p_moved_rank = -1,
                   int32_t heads = kHeads) {
    Pair out;
    for (int attempt = 0; attempt < 20 && out.p == nullptr; ++attempt) {
      auto p = Engine::Make("P", ps, PortsFor(ps.tp), p_moved_rank, heads);
      if (p.ok()) out.p = std::move(*p);
    }
    for (int attempt = 0; attempt < 20 && out.d == nullptr; ++attempt) {
      auto d = Engine::Make("D", ds, PortsFor(ds.tp), -1, heads);
      if (d.ok()) out.d = std::move(*d);
    }
    EXPECT_TRUE(out.p != nullptr && out.d != nullptr);
    return out;
  }

  // P computed `n` tokens into `blocks` and holds them on every rank; D's offer.
  KvTransferParams Offer(const std::string& id, std::span<const LogicalBlockId> blocks, int64_t n,
                         uint32_t salt) {
    p->Paint(salt, blocks, n, false);
    KvTransferParams offer;
    offer.do_remote_prefill = true;
    offer.remote_engine_id = p->engine_id;
    offer.remote_request_id = id;
    offer.remote_block_ids.assign(blocks.begin(), blocks.end());
    offer.remote_host = "127.0.0.1";
    offer.remote_port = p->base_port;
    offer.tp_size = p->spec.tp;
    offer.remote_block_generations = *mirror->Grant(id, blocks, Deadline::AfterMs(60000));
    ConnectorMetadata meta;
    meta.holds.push_back({id, offer.remote_block_ids, offer.remote_block_generations});
    p->Bind(meta);
    return offer;
  }

  // Steps both engines until every D connector reported the load of `id` and (when
  // `until_sent`) every P connector gave `id`'s blocks back; the D reports.
  std::vector<LoadReport> Step(const std::string& id, bool until_sent) {
    std::vector<LoadReport> reports;
    std::set<size_t> sent;
    Deadline deadline = Deadline::AfterMs(10000);
    while (!deadline.Expired()) {
      for (auto& c : d->conns) {
        ConnectorOutput o = c->worker()->GetFinished();
        for (LoadReport& r : o.load_reports) reports.push_back(std::move(r));
      }
      for (size_t i = 0; i < p->conns.size(); ++i) {
        ConnectorOutput o = p->conns[i]->worker()->GetFinished();
        for (const std::string& s : o.finished_sending) {
          if (s == id) sent.insert(i);
        }
      }
      if (reports.size() == d->conns.size() && (!until_sent || sent.size() == p->conns.size())) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(reports.size(), d->conns.size());
    if (until_sent) {
      EXPECT_EQ(sent.size(), p->conns.size()) << "a P rank still holds " << id;
    }
    return reports;
  }

  std::vector<LoadReport> Load(const KvTransferParams& offer,
                               std::span<const LogicalBlockId> blocks, int32_t n, bool until_sent) {
    ConnectorMetadata meta;
    meta.loads.push_back({offer.remote_request_id, offer,
                          std::vector<LogicalBlockId>(blocks.begin(), blocks.end()), 0, n - 1});
    d->Bind(meta);
    for (auto& c : d->conns) c->worker()->StartLoadKv();
    return Step(offer.remote_request_id, until_sent);
  }
};

TEST(SplitEngineTest, EveryPairOfSplitAndWholeEnginesMovesExactHeads) {
  const std::vector<EngineSpec> specs = {{1, false, 16, Layout::kNHD},
                                         {2, true, 16, Layout::kNHD},
                                         {2, false, 32, Layout::kHND},
                                         {2, true, 32, Layout::kHND},
                                         {4, true, 16, Layout::kHND}};
  for (const EngineSpec& ps : specs) {
    for (const EngineSpec& ds : specs) {
      if (!ps.split && !ds.split) continue;  // the loopback and pd_tp suites cover those
      SCOPED_TRACE("P " + Describe(ps) + "  D " + Describe(ds));
      Pair pair = Pair::Make(ps, ds);
      if (pair.p == nullptr || pair.d == nullptr) return;
      const int32_t n = 70;  // tokens; D pulls the first 69
      auto pblocks = ps.block_size == 16 ? Ids({3, 9, 4, 20, 21}) : Ids({5, 2, 30});
      auto dblocks = ds.block_size == 16 ? Ids({1, 2, 8, 7, 6}) : Ids({11, 12, 13});
      KvTransferParams offer = pair.Offer("r", pblocks, n, 6);
      std::vector<LoadReport> reports = pair.Load(offer, dblocks, n, /*until_sent=*/true);
      std::set<int32_t> d_ranks;
      for (const LoadReport& r : reports) {
        EXPECT_EQ(r.outcome, LoadOutcome::kPulled) << r.error;
        EXPECT_GT(r.bytes, 0u);
        for (const RankLoad& rank : r.ranks) d_ranks.insert(rank.rank);
      }
      EXPECT_EQ(d_ranks.size(), static_cast<size_t>(ds.tp));  // each engine rank, once
      EXPECT_TRUE(pair.d->Paint(6, dblocks, n - 1, true));
      for (auto& c : pair.p->conns) {
        EXPECT_EQ(c->Stats().leases_released_by_notification, 1u);
        EXPECT_EQ(c->Stats().blocks_held, 0);
      }
    }
  }
}

// One KV head, replicated on every rank: a D at TP 1 reads P's copy on rank 0 only, and D's
// release ends rank 1's share (nobody reads it) instead of its lease running out; two D ranks
// reading one P rank's head both notify it.
TEST(SplitEngineTest, ReplicasNobodyReadsGiveTheirBlocksBack) {
  for (auto [ps, ds] : {std::pair{EngineSpec{2, true}, EngineSpec{1, false}},
                        std::pair{EngineSpec{1, false}, EngineSpec{2, true}},
                        std::pair{EngineSpec{4, true}, EngineSpec{2, true}}}) {
    SCOPED_TRACE("P " + Describe(ps) + "  D " + Describe(ds));
    Pair pair = Pair::Make(ps, ds, -1, /*heads=*/1);
    if (pair.p == nullptr || pair.d == nullptr) return;
    auto dblocks = Ids({2, 3});
    KvTransferParams offer = pair.Offer("rep", Ids({6, 1}), 30, 8);
    for (const LoadReport& r : pair.Load(offer, dblocks, 30, /*until_sent=*/true)) {
      EXPECT_EQ(r.outcome, LoadOutcome::kPulled) << r.error;
    }
    EXPECT_TRUE(pair.d->Paint(8, dblocks, 29, true));
    for (auto& c : pair.p->conns) EXPECT_EQ(c->Stats().leases_expired, 0u);
  }
}

// D needs nothing of the offer: one release from D's rank 0 ends the lease on every P rank.
TEST(SplitEngineTest, AReleaseReachesEveryRankOfASplitP) {
  for (const EngineSpec& ds : {EngineSpec{1, false}, EngineSpec{2, true}}) {
    SCOPED_TRACE("D " + Describe(ds));
    Pair pair = Pair::Make({2, true}, ds);
    if (pair.p == nullptr || pair.d == nullptr) return;
    KvTransferParams offer = pair.Offer("rel", Ids({1, 2}), 20, 3);
    ConnectorMetadata meta;
    meta.releases.push_back(offer);
    pair.d->Bind(meta);
    std::set<size_t> sent;
    Deadline deadline = Deadline::AfterMs(10000);
    while (sent.size() < pair.p->conns.size() && !deadline.Expired()) {
      for (size_t i = 0; i < pair.p->conns.size(); ++i) {
        for (const std::string& s : pair.p->conns[i]->worker()->GetFinished().finished_sending) {
          if (s == "rel") sent.insert(i);
        }
      }
      for (auto& c : pair.d->conns) c->worker()->GetFinished();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(sent.size(), 2u);
    uint64_t released = 0;
    for (auto& c : pair.d->conns) released += c->Stats().notify_only;
    EXPECT_EQ(released, 1u);  // sent once, by D's rank 0
  }
}

// A release sent to a port that answers as rank 1 (kv_transfer_params name rank 0's port) goes
// no further: the other ranks' ports are counted from rank 0's, never from what a reply
// claims, so rank 0 keeps its hold (until its lease ends) and D counts no release sent.
TEST(SplitEngineTest, AReleaseAnsweredByAnotherRankThanZeroGoesNoFurther) {
  Pair pair = Pair::Make({2, true}, {1, false});
  if (pair.p == nullptr || pair.d == nullptr) return;
  KvTransferParams offer = pair.Offer("astray", Ids({1, 2}), 20, 4);
  offer.remote_port = pair.p->base_port + 1;
  ConnectorMetadata meta;
  meta.releases.push_back(offer);
  pair.d->Bind(meta);
  std::set<size_t> sent;
  Deadline deadline = Deadline::AfterMs(1500);
  while (!deadline.Expired()) {
    for (size_t i = 0; i < pair.p->conns.size(); ++i) {
      for (const std::string& s : pair.p->conns[i]->worker()->GetFinished().finished_sending) {
        if (s == "astray") sent.insert(i);
      }
    }
    pair.d->conns[0]->worker()->GetFinished();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(sent, std::set<size_t>{1}) << "the release reached ranks other than the one asked";
  EXPECT_EQ(pair.d->conns[0]->Stats().notifications_sent, 0u);
}

// P's rank 1 serves somewhere other than rank 0's port + 1: D cannot find it, the handshake
// fails within its deadline and the load is reported for recompute; nothing was read.
TEST(SplitEngineTest, ASplitPRankNotAtItsPortFailsTheHandshake) {
  Pair pair = Pair::Make({2, true}, {1, false}, /*p_moved_rank=*/1);
  if (pair.p == nullptr || pair.d == nullptr) return;
  auto dblocks = Ids({1, 2});
  KvTransferParams offer = pair.Offer("lost", Ids({4, 5}), 20, 2);
  std::vector<LoadReport> reports = pair.Load(offer, dblocks, 20, /*until_sent=*/false);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].outcome, LoadOutcome::kFailedHandshake) << reports[0].error;
  EXPECT_EQ(reports[0].bytes, 0u);
  EXPECT_EQ(pair.d->conns[0]->Stats().transfers, 0u);
}

}  // namespace
}  // namespace kvferry::connector::split_test
