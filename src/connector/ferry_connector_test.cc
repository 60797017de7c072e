// The connector's two halves driven directly (no engine) by P and D in one process over the
// loopback backend: the KV bytes D ends up with must be exactly P's, for every geometry pair,
// and every failure kind must report the right LOGICAL blocks.
#include "kvferry/connector/ferry_connector.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "connector/ferry_connector_impl.h"
#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/transfer/loopback.h"
#include "transfer/backends/socket/socket_blob.h"
#include "transfer/metadata.h"

namespace kvferry::connector {
namespace {

using kv::KernelBlockId;
using kv::Layout;
using kv::LogicalBlockId;

uint32_t Pattern(uint32_t salt, int32_t region, int64_t token, int32_t head, int32_t e) {
  return (salt << 28) ^ (static_cast<uint32_t>(region) << 22) ^
         (static_cast<uint32_t>(token) << 6) ^ (static_cast<uint32_t>(head) << 3) ^
         static_cast<uint32_t>(e);
}

struct Geometry {
  int32_t block_size_logical;
  int32_t block_size_kernel;
  Layout layout;
  bool host_buffer;
};

std::string Describe(const Geometry& g) {
  return std::to_string(g.block_size_logical) + "/" + std::to_string(g.block_size_kernel) + "/" +
         std::string(kv::LayoutName(g.layout)) + (g.host_buffer ? "/cpu" : "");
}

int g_counter = 0;

struct Side {
  // With `borrow`: the cache's memory, owned here as another engine's tensors would be (it
  // outlives the connector: declared before it).
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<std::byte, Free>> borrowed;
  std::unique_ptr<FerryConnector> conn;
  std::unique_ptr<kv::KvCache> cache;
  std::optional<kv::BlockGeometry> geometry;
  KvTransferConfig config;

  static Side Make(const std::string& role, const Geometry& g, KvTransferConfig config = {},
                   bool borrow = false, bool external_scheduler = false) {
    Side s;
    config.kv_connector = "FerryConnector";
    // Loopback unless the test asked for another backend than the default.
    if (config.backend == KvTransferConfig{}.backend)
      config.backend = transfer::BackendKind::kLoopback;
    config.engine_id = role + "-" + std::to_string(++g_counter);
    config.kv_buffer_device = g.host_buffer ? "cpu" : "direct";
    if (config.handshake_timeout_ms == KvTransferConfig{}.handshake_timeout_ms) {
      config.handshake_timeout_ms = 3000;
    }
    s.config = config;
    auto conn = CreateFerryConnector(
        config, {.model_name = "test-model", .external_scheduler = external_scheduler});
    EXPECT_TRUE(conn.ok()) << conn.status();
    s.conn = std::move(*conn);
    kv::CacheSpec spec;
    spec.num_layers = 2;
    spec.num_kv_heads = 2;
    spec.head_dim = 4;
    spec.dtype = kv::DType::kF32;
    spec.layout = g.layout;
    spec.block_size_kernel = g.block_size_kernel;
    spec.num_blocks_kernel = 64 * (g.block_size_logical / g.block_size_kernel);
    if (borrow) {
      std::vector<kv::RegionView> regions;
      for (int32_t r = 0; r < spec.num_regions(); ++r) {
        const size_t bytes = (spec.region_bytes() + 63) / 64 * 64;  // aligned, as tensors are
        s.borrowed.emplace_back(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
        std::memset(s.borrowed.back().get(), 0, bytes);
        regions.push_back({s.borrowed.back().get(), bytes});
      }
      s.cache = std::move(*kv::KvCache::Borrow(spec, std::move(regions)));
    } else {
      s.cache = std::move(*kv::KvCache::Allocate(spec));
    }
    s.geometry = *kv::BlockGeometry::Create(g.block_size_logical, g.block_size_kernel);
    Status st = s.conn->worker()->RegisterKvCache(s.cache.get(), g.block_size_logical);
    EXPECT_TRUE(st.ok()) << st;
    return s;
  }

  uint32_t* Slot(int32_t region, std::span<const LogicalBlockId> ids, int64_t t, int32_t head) {
    auto slot = geometry->KernelSlotOfToken(ids, t);
    EXPECT_TRUE(slot.ok());
    return reinterpret_cast<uint32_t*>(cache->region(region).base) +
           cache->spec().ElementOffset(slot->block, slot->token_in_block, head);
  }
  void Fill(uint32_t salt, std::span<const LogicalBlockId> ids, int64_t begin, int64_t end) {
    for (int32_t r = 0; r < cache->num_regions(); ++r)
      for (int64_t t = begin; t < end; ++t)
        for (int32_t h = 0; h < 2; ++h)
          for (int32_t e = 0; e < 4; ++e) Slot(r, ids, t, h)[e] = Pattern(salt, r, t, h, e);
  }
  // Tokens [begin, end) hold `salt`'s pattern.
  ::testing::AssertionResult Holds(uint32_t salt, std::span<const LogicalBlockId> ids,
                                   int64_t begin, int64_t end) {
    for (int32_t r = 0; r < cache->num_regions(); ++r)
      for (int64_t t = begin; t < end; ++t)
        for (int32_t h = 0; h < 2; ++h)
          for (int32_t e = 0; e < 4; ++e)
            if (Slot(r, ids, t, h)[e] != Pattern(salt, r, t, h, e)) {
              return ::testing::AssertionFailure() << "region " << r << " token " << t;
            }
    return ::testing::AssertionSuccess();
  }
};

std::vector<LogicalBlockId> Ids(std::vector<int32_t> v) {
  std::vector<LogicalBlockId> out;
  for (int32_t x : v) out.emplace_back(x);
  return out;
}

// P side of one request: prefill (host buffer: staged per chunk), finish, get the params.
KvTransferParams PrefillOnP(Side& p, const std::string& id, std::vector<int32_t>& prompt,
                            std::span<const LogicalBlockId> blocks, uint32_t salt) {
  KvTransferParams in;
  in.do_remote_decode = true;
  RequestView view{id, prompt, static_cast<int32_t>(prompt.size()), &in};
  // Two chunks, like a chunked prefill: each is computed, then staged after "its forward".
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t mid = n / 2;
  p.Fill(salt, blocks, 0, mid);
  p.conn->scheduler()->OnTokensComputed(view, blocks, 0, static_cast<int32_t>(mid));
  p.conn->worker()->AfterForward();
  p.Fill(salt, blocks, mid, n);
  p.conn->scheduler()->OnTokensComputed(view, blocks, static_cast<int32_t>(mid),
                                        static_cast<int32_t>(n));
  FinishResult fin = p.conn->scheduler()->RequestFinished(view, blocks);
  EXPECT_TRUE(fin.delay_free_blocks);
  EXPECT_TRUE(fin.kv_transfer_params.has_value());
  p.conn->worker()->BindMetadata(p.conn->scheduler()->BuildConnectorMeta());
  p.conn->worker()->AfterForward();
  return fin.kv_transfer_params.value_or(KvTransferParams{});
}

struct PullResult {
  bool finished = false;
  std::vector<LogicalBlockId> invalid;
};

// D side: match, allocate, then step until the load is reported (or 10 s).
// `expected_external` < 0: the whole prompt but its last token (which D computes itself).
PullResult PullOnD(Side& d, const std::string& id, std::vector<int32_t>& prompt,
                   const KvTransferParams& params, std::span<const LogicalBlockId> blocks,
                   int32_t num_local_computed, Side* p = nullptr, int32_t expected_external = -1) {
  RequestView view{id, prompt, static_cast<int32_t>(prompt.size()), &params, num_local_computed};
  MatchResult m = d.conn->scheduler()->GetNumNewMatchedTokens(view, num_local_computed);
  if (expected_external < 0) {
    expected_external = static_cast<int32_t>(prompt.size()) - 1 - num_local_computed;
  }
  EXPECT_EQ(m.num_external_tokens, expected_external);
  d.conn->scheduler()->UpdateStateAfterAlloc(view, blocks, m.num_external_tokens);
  d.conn->worker()->BindMetadata(d.conn->scheduler()->BuildConnectorMeta());
  d.conn->worker()->StartLoadKv();
  PullResult out;
  Deadline deadline = Deadline::AfterMs(10000);
  while (!deadline.Expired()) {
    ConnectorOutput o = d.conn->worker()->GetFinished();
    d.conn->scheduler()->UpdateConnectorOutput(o);
    if (p != nullptr) {
      ConnectorOutput po = p->conn->worker()->GetFinished();
      p->conn->scheduler()->UpdateConnectorOutput(po);
    }
    out.invalid.insert(out.invalid.end(), o.invalid_block_ids.begin(), o.invalid_block_ids.end());
    if (std::find(o.finished_recving.begin(), o.finished_recving.end(), id) !=
        o.finished_recving.end()) {
      out.finished = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

// P steps until `id` is reported finished_sending (its blocks may be freed), or 10 s.
bool WaitSent(Side& p, const std::string& id) {
  Deadline deadline = Deadline::AfterMs(10000);
  while (!deadline.Expired()) {
    ConnectorOutput o = p.conn->worker()->GetFinished();
    p.conn->scheduler()->UpdateConnectorOutput(o);
    if (std::find(o.finished_sending.begin(), o.finished_sending.end(), id) !=
        o.finished_sending.end()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Steps P's worker until `done(P's stats)` holds; false after 10 s.
bool WaitStats(Side& p, const std::function<bool(const ConnectorStats&)>& done) {
  Deadline deadline = Deadline::AfterMs(10000);
  while (!done(p.conn->Stats())) {
    if (deadline.Expired()) return false;
    p.conn->scheduler()->UpdateConnectorOutput(p.conn->worker()->GetFinished());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i % 250);
  return v;
}

TEST(FerryConnectorTest, ParamsCarryLogicalIdsAndVllmNames) {
  Side p = Side::Make("P", {128, 64, Layout::kNHD, false});
  auto prompt = Prompt(300);
  auto blocks = Ids({5, 2, 9});
  KvTransferParams params = PrefillOnP(p, "r1", prompt, blocks, 1);
  EXPECT_TRUE(params.do_remote_prefill);
  EXPECT_EQ(params.remote_engine_id, p.conn->engine_id());
  EXPECT_EQ(params.remote_request_id, "r1");
  EXPECT_EQ(params.remote_block_ids, blocks);  // logical, not kernel (which would be 10,11,...)
  EXPECT_EQ(params.remote_port, p.conn->side_channel_port());
  EXPECT_EQ(params.tp_size, 1);
  EXPECT_EQ(params.remote_block_generations.size(), 3u);
  EXPECT_EQ(p.conn->Stats().blocks_held, 3);
}

// The connector needs no kvferry engine: caches that are views of memory another engine owns
// (as vLLM's KV tensors would be), driven through the two halves alone, pull exact bytes.
TEST(FerryConnectorTest, BorrowedCachesOfAnotherEngineMoveExactBytes) {
  for (bool host_buffer : {false, true}) {
    SCOPED_TRACE(host_buffer ? "host buffer" : "direct");
    Side p = Side::Make("P", {128, 64, Layout::kHND, host_buffer}, {}, /*borrow=*/true);
    Side d = Side::Make("D", {16, 16, Layout::kNHD, false}, {}, /*borrow=*/true);
    ASSERT_EQ(p.cache->region(0).base, p.borrowed[0].get());
    auto prompt = Prompt(300);
    auto pblocks = Ids({4, 1, 7});
    std::vector<int32_t> dv;
    for (int32_t i = 0; i < 19; ++i) dv.push_back(40 - i);
    auto dblocks = Ids(dv);
    KvTransferParams params = PrefillOnP(p, "b1", prompt, pblocks, 77);
    PullResult out = PullOnD(d, "b1", prompt, params, dblocks, 0);
    ASSERT_TRUE(out.finished);
    EXPECT_TRUE(out.invalid.empty());
    EXPECT_TRUE(d.Holds(77, dblocks, 0, 299));
    EXPECT_GT(d.conn->Stats().bytes, 0u);
    EXPECT_EQ(d.conn->Stats().failures_transfer, 0u);
    EXPECT_TRUE(WaitSent(p, "b1"));
  }
}

TEST(FerryConnectorTest, GeometryPairsMoveExactBytes) {
  const Geometry geos[] = {
      {16, 16, Layout::kNHD, false},  {64, 64, Layout::kHND, false},
      {128, 64, Layout::kNHD, false}, {128, 64, Layout::kHND, true},
      {256, 64, Layout::kNHD, false}, {256, 256, Layout::kHND, false},
      {64, 32, Layout::kNHD, true},
  };
  uint32_t salt = 0;
  for (const Geometry& pg : geos) {
    for (const Geometry& dg : geos) {
      SCOPED_TRACE("P " + Describe(pg) + " D " + Describe(dg));
      Side p = Side::Make("P", pg);
      Side d = Side::Make("D", dg);
      for (int64_t n : {int64_t{5}, int64_t{3 * 256 + 7}}) {
        ++salt;
        auto prompt = Prompt(n);
        const int32_t pb =
            static_cast<int32_t>((n + pg.block_size_logical - 1) / pg.block_size_logical);
        const int32_t db =
            static_cast<int32_t>((n + dg.block_size_logical - 1) / dg.block_size_logical);
        std::vector<int32_t> pv, dv;
        for (int32_t i = 0; i < pb; ++i) pv.push_back((7 * i + 3) % 64);
        for (int32_t i = 0; i < db; ++i) dv.push_back((5 * i + 1) % 64);
        auto pblocks = Ids(pv), dblocks = Ids(dv);
        const std::string id = "req-" + std::to_string(salt);
        KvTransferParams params = PrefillOnP(p, id, prompt, pblocks, salt);
        // A D prefix hit of one block when the prompt spans several.
        const int32_t local = n > dg.block_size_logical ? dg.block_size_logical : 0;
        d.Fill(salt + 1000, dblocks, 0, local);
        PullResult out = PullOnD(d, id, prompt, params, dblocks, local);
        ASSERT_TRUE(out.finished);
        EXPECT_TRUE(out.invalid.empty());
        EXPECT_TRUE(d.Holds(salt + 1000, dblocks, 0, local));  // prefix untouched
        EXPECT_TRUE(d.Holds(salt, dblocks, local, n - 1));
        EXPECT_TRUE(WaitSent(p, id));
        EXPECT_EQ(p.conn->Stats().blocks_held, 0);
      }
    }
  }
}

TEST(FerryConnectorTest, FullPrefixHitOnlyNotifies) {
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(128);
  auto blocks = Ids({1, 2});
  KvTransferParams params = PrefillOnP(p, "full", prompt, blocks, 3);
  RequestView view{"full", prompt, 128, &params};
  MatchResult m = d.conn->scheduler()->GetNumNewMatchedTokens(view, 128);
  EXPECT_EQ(m.num_external_tokens, 0);
  EXPECT_FALSE(m.load_async);
  d.conn->scheduler()->UpdateStateAfterAlloc(view, blocks, 0);
  d.conn->worker()->BindMetadata(d.conn->scheduler()->BuildConnectorMeta());
  d.conn->worker()->StartLoadKv();
  Deadline deadline = Deadline::AfterMs(10000);
  while (d.conn->Stats().notifications_sent == 0 && !deadline.Expired()) {
    ConnectorOutput o = d.conn->worker()->GetFinished();
    EXPECT_TRUE(o.finished_recving.empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(d.conn->Stats().transfers, 0u);
  EXPECT_TRUE(WaitSent(p, "full"));
  EXPECT_EQ(p.conn->Stats().leases_released_by_notification, 1u);
}

// P's copy of the second chunk into its host buffer fails: P offers only the logical blocks
// before it (remote_num_tokens says how far they go), D reads exactly those and nothing of the
// failed part, and P counts the failure.
TEST(FerryConnectorTest, StagingFailureWithholdsTheBlocksFromThere) {
  Side p = Side::Make("P", {64, 64, Layout::kNHD, true});
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  static_cast<internal::FerryConnectorImpl*>(p.conn.get())->stage_fault_for_test =
      [](const std::string&, int32_t token_begin) { return token_begin == 150; };
  auto prompt = Prompt(300);  // PrefillOnP stages [0, 150) then [150, 300)
  auto pblocks = Ids({7, 8, 9, 10, 11});
  KvTransferParams params = PrefillOnP(p, "sf", prompt, pblocks, 21);
  EXPECT_EQ(params.remote_block_ids, Ids({7, 8}));  // tokens [0, 128): staged before the fault
  EXPECT_EQ(params.remote_num_tokens, 128);
  EXPECT_EQ(params.remote_block_generations.size(), 2u);
  EXPECT_EQ(p.conn->Stats().stage_failures, 1u);
  EXPECT_EQ(p.conn->Stats().blocks_withheld, 3u);
  EXPECT_EQ(p.conn->Stats().blocks_held, 2);
  auto dblocks = Ids({1, 2, 3, 4, 5});
  RequestView view{"sf", prompt, 300, &params, 0};
  EXPECT_EQ(d.conn->scheduler()->GetNumNewMatchedTokens(view, 0).num_external_tokens, 128);
  PullResult out = PullOnD(d, "sf", prompt, params, dblocks, 0, /*p=*/nullptr,
                           /*expected_external=*/128);
  ASSERT_TRUE(out.finished);
  EXPECT_TRUE(out.invalid.empty());
  EXPECT_TRUE(d.Holds(21, dblocks, 0, 128));
  // Two kernel blocks of 64 tokens in each of the 4 regions, nothing more.
  EXPECT_EQ(d.conn->Stats().bytes, 2u * 4u * 64u * 2u * 4u * 4u);
  EXPECT_TRUE(WaitSent(p, "sf"));
}

TEST(FerryConnectorTest, StagingFailureOfTheFirstChunkOffersNothing) {
  Side p = Side::Make("P", {64, 64, Layout::kHND, true});
  static_cast<internal::FerryConnectorImpl*>(p.conn.get())->stage_fault_for_test =
      [](const std::string&, int32_t token_begin) { return token_begin == 0; };
  auto prompt = Prompt(100);
  auto pblocks = Ids({1, 2});
  KvTransferParams in;
  in.do_remote_decode = true;
  RequestView view{"none", prompt, 100, &in, 0};
  p.Fill(3, pblocks, 0, 100);
  p.conn->scheduler()->OnTokensComputed(view, pblocks, 0, 100);
  FinishResult fin = p.conn->scheduler()->RequestFinished(view, pblocks);
  EXPECT_FALSE(fin.delay_free_blocks);  // nothing leased
  ASSERT_TRUE(fin.kv_transfer_params.has_value());
  EXPECT_TRUE(fin.kv_transfer_params->remote_block_ids.empty());
  EXPECT_EQ(fin.kv_transfer_params->remote_num_tokens, 0);
  EXPECT_EQ(p.conn->Stats().leases_granted, 0u);
  // D: nothing to read and no lease to release.
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  RequestView dview{"none", prompt, 100, &*fin.kv_transfer_params, 0};
  MatchResult m = d.conn->scheduler()->GetNumNewMatchedTokens(dview, 0);
  EXPECT_EQ(m.num_external_tokens, 0);
  EXPECT_EQ(m.no_load_outcome, LoadOutcome::kNoneOffered);
}

TEST(FerryConnectorTest, StagingFailureWithPolicyFailFailsTheRequest) {
  KvTransferConfig pc;
  pc.kv_load_failure_policy = KvLoadFailurePolicy::kFail;
  Side p = Side::Make("P", {64, 64, Layout::kNHD, true}, pc);
  static_cast<internal::FerryConnectorImpl*>(p.conn.get())->stage_fault_for_test =
      [](const std::string&, int32_t token_begin) { return token_begin == 64; };
  auto prompt = Prompt(128);
  auto pblocks = Ids({1, 2});
  KvTransferParams in;
  in.do_remote_decode = true;
  RequestView view{"f", prompt, 128, &in, 0};
  p.conn->scheduler()->OnTokensComputed(view, pblocks, 0, 64);
  p.conn->worker()->AfterForward();
  p.conn->scheduler()->OnTokensComputed(view, pblocks, 64, 128);
  FinishResult fin = p.conn->scheduler()->RequestFinished(view, pblocks);
  EXPECT_EQ(fin.error.code(), StatusCode::kDataLoss) << fin.error;
  EXPECT_FALSE(fin.kv_transfer_params.has_value());
  EXPECT_FALSE(fin.delay_free_blocks);
  EXPECT_EQ(p.conn->Stats().leases_granted, 0u);
  EXPECT_EQ(p.conn->Stats().blocks_held, 0);
}

TEST(FerryConnectorTest, HandshakeFails) {
  KvTransferConfig pc;
  pc.auth_token = "right";
  Side p = Side::Make("P", {128, 64, Layout::kNHD, false}, pc);
  KvTransferConfig dc;
  dc.auth_token = "wrong";
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false}, dc);
  auto prompt = Prompt(200);
  auto pblocks = Ids({1, 2});
  auto dblocks = Ids({3, 4, 5, 6});
  KvTransferParams params = PrefillOnP(p, "hs", prompt, pblocks, 4);
  PullResult out = PullOnD(d, "hs", prompt, params, dblocks, 64);
  ASSERT_TRUE(out.finished);
  EXPECT_EQ(out.invalid, Ids({4, 5, 6}));  // D's logical blocks of tokens [64, 200)
  EXPECT_EQ(d.conn->Stats().failures_handshake, 1u);
  // Nothing notified P: the lease is still there until it runs out.
  EXPECT_EQ(p.conn->Stats().blocks_held, 2);
}

TEST(FerryConnectorTest, ASideChannelOfAnotherEngineIsRefused) {
  // kv_transfer_params name engine "P-impostor" at P's side channel: what answers there is
  // another engine (P), so D refuses it in the handshake (nothing read, nothing notified) and
  // recomputes; P's own engine id at the same address then pulls exactly.
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(100);
  KvTransferParams params = PrefillOnP(p, "who", prompt, Ids({1, 2}), 13);
  KvTransferParams claimed = params;
  claimed.remote_engine_id = "P-impostor";
  PullResult out = PullOnD(d, "who-1", prompt, claimed, Ids({3, 4}), 0);
  ASSERT_TRUE(out.finished);
  EXPECT_EQ(out.invalid, Ids({3, 4}));
  EXPECT_EQ(d.conn->Stats().failures_handshake, 1u);
  EXPECT_EQ(d.conn->Stats().bytes, 0u);
  EXPECT_EQ(p.conn->Stats().leases_released_by_notification, 0u);
  out = PullOnD(d, "who-2", prompt, params, Ids({5, 6}), 0, &p);
  ASSERT_TRUE(out.finished);
  EXPECT_TRUE(out.invalid.empty());
  EXPECT_TRUE(d.Holds(13, Ids({5, 6}), 0, 99));
  EXPECT_TRUE(
      WaitStats(p, [](const ConnectorStats& s) { return s.leases_released_by_notification == 1; }));
}

TEST(FerryConnectorTest, HandshakeToNobodyFailsWithinTheDeadline) {
  KvTransferConfig dc;
  dc.handshake_timeout_ms = 200;
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false}, dc);
  auto prompt = Prompt(100);
  auto dblocks = Ids({0, 1});
  KvTransferParams params;
  params.do_remote_prefill = true;
  params.remote_engine_id = "nobody";
  params.remote_request_id = "x";
  params.remote_block_ids = Ids({0, 1});
  params.remote_host = "127.0.0.1";
  params.remote_port = 1;  // nothing listens
  auto t0 = std::chrono::steady_clock::now();
  PullResult out = PullOnD(d, "nobody", prompt, params, dblocks, 0);
  ASSERT_TRUE(out.finished);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(out.invalid, Ids({0, 1}));
}

TEST(FerryConnectorTest, TransferFails) {
  Side p = Side::Make("P", {128, 64, Layout::kNHD, false});
  Side d = Side::Make("D", {128, 64, Layout::kNHD, false});
  auto prompt = Prompt(300);
  auto pblocks = Ids({1, 2, 3});
  auto dblocks = Ids({7, 8, 9});
  KvTransferParams params = PrefillOnP(p, "tf", prompt, pblocks, 5);
  ASSERT_TRUE(
      transfer::loopback::InjectFault(d.config.engine_id, transfer::loopback::Fault::kFailNext)
          .ok());
  PullResult out = PullOnD(d, "tf", prompt, params, dblocks, 0);
  ASSERT_TRUE(out.finished);
  EXPECT_EQ(out.invalid, dblocks);
  EXPECT_EQ(d.conn->Stats().failures_transfer, 1u);
  // The next request re-handshakes and succeeds.
  KvTransferParams again = PrefillOnP(p, "tf2", prompt, Ids({4, 5, 6}), 6);
  PullResult ok = PullOnD(d, "tf2", prompt, again, Ids({10, 11, 12}), 0);
  ASSERT_TRUE(ok.finished);
  EXPECT_TRUE(ok.invalid.empty());
  auto d2 = Ids({10, 11, 12});
  EXPECT_TRUE(d.Holds(6, d2, 0, 299));
}

TEST(FerryConnectorTest, TransferDeadline) {
  Side p = Side::Make("P", {64, 64, Layout::kHND, false});
  KvTransferConfig dc;
  dc.transfer_timeout_ms = 200;
  Side d = Side::Make("D", {64, 32, Layout::kNHD, false}, dc);
  auto prompt = Prompt(100);
  KvTransferParams params = PrefillOnP(p, "dl", prompt, Ids({1, 2}), 7);
  ASSERT_TRUE(
      transfer::loopback::InjectFault(d.config.engine_id, transfer::loopback::Fault::kStallNext)
          .ok());
  auto t0 = std::chrono::steady_clock::now();
  PullResult out = PullOnD(d, "dl", prompt, params, Ids({3, 4}), 0);
  ASSERT_TRUE(out.finished);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(out.invalid, Ids({3, 4}));
  EXPECT_EQ(d.conn->Stats().failures_deadline, 1u);
}

TEST(FerryConnectorTest, LeaseExpiresDuringRead) {
  // P's lease runs out after D's data READ landed but before D confirmed it, and P reuses the
  // blocks for another prompt. D's generation check must catch it.
  KvTransferConfig pc;
  pc.lease_ms = 50;
  Side p = Side::Make("P", {128, 64, Layout::kNHD, false}, pc);
  Side d = Side::Make("D", {128, 64, Layout::kNHD, false});
  auto prompt = Prompt(256);
  auto pblocks = Ids({1, 2});
  KvTransferParams params = PrefillOnP(p, "lease", prompt, pblocks, 8);
  auto dblocks = Ids({5, 6});
  int hook_calls = 0;
  static_cast<internal::FerryConnectorImpl*>(d.conn.get())->after_data_read_for_test =
      [&](const std::string& id) {
        ++hook_calls;
        EXPECT_EQ(id, "lease");
        std::this_thread::sleep_for(std::chrono::milliseconds(80));
        EXPECT_TRUE(WaitSent(p, "lease"));  // the lease ran out: P frees ...
        p.Fill(99, pblocks, 0, 256);        // ... and reuses the blocks
      };
  PullResult out = PullOnD(d, "lease", prompt, params, dblocks, 0);
  ASSERT_TRUE(out.finished);
  EXPECT_EQ(hook_calls, 1);
  EXPECT_EQ(out.invalid, dblocks);
  EXPECT_EQ(d.conn->Stats().failures_generation, 1u);
  EXPECT_EQ(p.conn->Stats().leases_expired, 1u);
  EXPECT_EQ(p.conn->Stats().blocks_held, 0);
}

TEST(FerryConnectorTest, ReadAfterLeaseExpiredIsAGenerationMismatch) {
  KvTransferConfig pc;
  pc.lease_ms = 1;
  Side p = Side::Make("P", {64, 64, Layout::kNHD, true}, pc);
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(100);
  KvTransferParams params = PrefillOnP(p, "late", prompt, Ids({0, 1}), 9);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(WaitSent(p, "late"));
  PullResult out = PullOnD(d, "late", prompt, params, Ids({2, 3}), 0);
  ASSERT_TRUE(out.finished);
  EXPECT_EQ(out.invalid, Ids({2, 3}));
  EXPECT_EQ(d.conn->Stats().failures_generation, 1u);
}

TEST(FerryConnectorTest, MissingGenerationsAreReadBeforeTheData) {
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  Side d = Side::Make("D", {128, 64, Layout::kHND, false});
  auto prompt = Prompt(150);
  KvTransferParams params = PrefillOnP(p, "nogen", prompt, Ids({4, 5, 6}), 10);
  params.remote_block_generations.clear();  // a proxy that dropped kvferry's extra field
  auto dblocks = Ids({1, 2});
  PullResult out = PullOnD(d, "nogen", prompt, params, dblocks, 0);
  ASSERT_TRUE(out.finished);
  EXPECT_TRUE(out.invalid.empty());
  EXPECT_TRUE(d.Holds(10, dblocks, 0, 149));
  EXPECT_TRUE(WaitSent(p, "nogen"));
}

TEST(FerryConnectorTest, SideChannelGarbageKeepsServing) {
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  // Garbage gets a clear error reply; the next handshake still works.
  for (std::string_view junk :
       {std::string_view("garbage"), std::string_view("\x93\x01", 2), std::string_view()}) {
    auto reply = internal::FetchOverSideChannel("127.0.0.1", p.conn->side_channel_port(), junk,
                                                Deadline::AfterMs(5000));
    ASSERT_TRUE(reply.ok()) << reply.status();
    auto decoded = internal::DecodeHandshakeReply(*reply, "any");
    EXPECT_EQ(decoded.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(decoded.status().message().find("malformed request"), std::string_view::npos)
        << decoded.status();
  }
  Side d = Side::Make("D", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(70);
  KvTransferParams params = PrefillOnP(p, "g", prompt, Ids({1, 2}), 11);
  PullResult out = PullOnD(d, "g", prompt, params, Ids({3, 4}), 0);
  ASSERT_TRUE(out.finished);
  EXPECT_TRUE(out.invalid.empty());
}

// P's rank-0 agent metadata, fetched over its side channel as a D would.
std::string AgentMetadataOf(Side& p) {
  auto reply = internal::FetchOverSideChannel("127.0.0.1", p.conn->side_channel_port(),
                                              internal::EncodeHandshakeRequest(0, ""),
                                              Deadline::AfterMs(5000));
  if (!reply.ok()) {
    ADD_FAILURE() << reply.status();
    return "";
  }
  auto ranks = internal::DecodeHandshakeReply(
      *reply, internal::CompatibilityHash("test-model", p.cache->spec()));
  if (!ranks.ok()) {
    ADD_FAILURE() << ranks.status();
    return "";
  }
  return (*ranks)[0].agent_metadata;
}

TEST(FerryConnectorTest, ARepeatedNotificationCountsOnce) {
  // A lease read by a D of TP 2 ends after both D ranks' agents notified P. One agent that
  // notifies twice (a peer repeating itself, or claiming to be both ranks) ends nothing: the
  // second is counted as a duplicate; the other agent's notification then ends the lease.
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(70);
  KvTransferParams params = PrefillOnP(p, "dup", prompt, Ids({1, 2}), 12);
  const std::string meta = AgentMetadataOf(p);
  const std::string note = internal::EncodePullNotification(params.remote_request_id, 2);
  auto notify = [&](const std::string& name, int times) {
    transfer::AgentOptions options;
    options.name = name;
    options.backend = transfer::BackendKind::kLoopback;
    auto a = std::move(*transfer::Agent::Create(options));
    auto peer = a->LoadRemoteMetadata(meta);
    ASSERT_TRUE(peer.ok()) << peer.status();
    for (int i = 0; i < times; ++i) ASSERT_TRUE(a->SendNotification(*peer, note).ok());
  };
  notify("dup-d.tp0", 2);
  ASSERT_TRUE(WaitStats(p, [](const ConnectorStats& s) { return s.notifications_duplicate > 0; }));
  for (int i = 0; i < 20; ++i) {  // and nothing more happens
    ConnectorOutput o = p.conn->worker()->GetFinished();
    EXPECT_TRUE(o.finished_sending.empty());
    p.conn->scheduler()->UpdateConnectorOutput(o);
  }
  EXPECT_EQ(p.conn->Stats().notifications_duplicate, 1u);
  EXPECT_EQ(p.conn->Stats().leases_released_by_notification, 0u);
  EXPECT_GT(p.conn->Stats().blocks_held, 0);
  notify("dup-d.tp1", 1);
  EXPECT_TRUE(WaitSent(p, "dup"));
  EXPECT_EQ(p.conn->Stats().leases_released_by_notification, 1u);
  EXPECT_EQ(p.conn->Stats().blocks_held, 0);
}

TEST(FerryConnectorTest, StatsCountWhatTheAgentsRefused) {
  // P's socket-backend agent drops a connection that opens without a hello; P's stats (and so
  // /metrics) count it by reason after the next step.
  KvTransferConfig pc;
  pc.backend = transfer::BackendKind::kSocket;
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false}, pc);
  auto blob =
      transfer::sock::DecodeSocketBlob(transfer::DecodeMetadata(AgentMetadataOf(p))->backend_blob);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(blob->port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string junk(48, '\x02');
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 48);
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "not dropped";
  ::close(fd);
  ASSERT_TRUE(WaitStats(p, [](const ConnectorStats& s) {
    auto it = s.refused_inbound.find("no_hello");
    return it != s.refused_inbound.end() && it->second == 1;
  })) << "refusal not counted";
  EXPECT_EQ(p.conn->Stats().refused_inbound.at("bad_secret"), 0u);
}

TEST(FerryConnectorTest, RolesProducerAndConsumer) {
  KvTransferConfig pc;
  pc.kv_role = KvRole::kProducer;
  Side p = Side::Make("P", {64, 64, Layout::kNHD, true}, pc);
  KvTransferConfig dc;
  dc.kv_role = KvRole::kConsumer;
  Side d = Side::Make("D", {64, 64, Layout::kNHD, true}, dc);
  EXPECT_GT(p.conn->side_channel_port(), 0);
  EXPECT_EQ(d.conn->side_channel_port(), 0);  // a consumer serves nothing
  auto prompt = Prompt(100);
  KvTransferParams params = PrefillOnP(p, "roles", prompt, Ids({1, 2}), 13);
  // A producer never pulls.
  RequestView view{"x", prompt, 100, &params};
  EXPECT_EQ(p.conn->scheduler()->GetNumNewMatchedTokens(view, 0).num_external_tokens, 0);
  PullResult out = PullOnD(d, "roles", prompt, params, Ids({3, 4}), 0);
  ASSERT_TRUE(out.finished);
  EXPECT_TRUE(out.invalid.empty());
  auto dblocks = Ids({3, 4});
  EXPECT_TRUE(d.Holds(13, dblocks, 0, 99));
  EXPECT_TRUE(WaitSent(p, "roles"));
}

TEST(FerryConnectorTest, ShutdownIsIdempotentAndLaterCallsAreHarmless) {
  Side p = Side::Make("P", {64, 64, Layout::kNHD, false});
  auto prompt = Prompt(70);
  KvTransferParams params = PrefillOnP(p, "s", prompt, Ids({1, 2}), 12);
  p.conn->worker()->Shutdown();
  p.conn->worker()->Shutdown();
  ConnectorOutput o = p.conn->worker()->GetFinished();
  EXPECT_TRUE(o.finished_sending.empty());
  RequestView view{"s2", prompt, 70, &params};
  EXPECT_FALSE(p.conn->scheduler()->RequestFinished(view, Ids({3})).kv_transfer_params);
}

// ---------------------------------------------------------------------------------------------
// A scheduler outside the connector (vLLM's): P's saves and holds, and D's loads and releases,
// arrive in ConnectorMetadata; the scheduler promises D generations from its own mirror table.

struct External {
  Side p;
  Side d;
  LeaseTable mirror{64};  // P's table size: 64 logical blocks (Side::Make)

  explicit External(bool host_buffer)
      : p(Side::Make("P", {64, 64, Layout::kHND, host_buffer}, {}, true, true)),
        d(Side::Make("D", {64, 64, Layout::kHND, false}, {}, true, true)) {}

  // P computes `n` tokens into `blocks` in two chunks, staged after each "forward" as the
  // scheduler's saves say; the scheduler's mirror grants the hold; the offer D gets.
  KvTransferParams Prefill(const std::string& id, std::span<const LogicalBlockId> blocks, int32_t n,
                           uint32_t salt) {
    std::vector<LogicalBlockId> ids(blocks.begin(), blocks.end());
    for (auto [begin, end] : {std::pair{0, n / 2}, std::pair{n / 2, n}}) {
      p.Fill(salt, blocks, begin, end);
      ConnectorMetadata meta;
      meta.saves.push_back({id, ids, begin, end});
      p.conn->worker()->BindMetadata(meta);
      p.conn->worker()->AfterForward();
    }
    KvTransferParams offer;
    offer.do_remote_prefill = true;
    offer.remote_engine_id = p.conn->engine_id();
    offer.remote_request_id = id;
    offer.remote_block_ids = ids;
    offer.remote_host = "127.0.0.1";
    offer.remote_port = p.conn->side_channel_port();
    offer.remote_block_generations = *mirror.Grant(id, blocks, Deadline::AfterMs(60000));
    return offer;
  }
  void Hold(const KvTransferParams& offer, std::vector<uint64_t> generations) {
    ConnectorMetadata meta;
    meta.holds.push_back({offer.remote_request_id, offer.remote_block_ids, std::move(generations)});
    p.conn->worker()->BindMetadata(meta);
  }
  // D loads tokens [0, n - 1) of the offer into `blocks`; its report once the load ended.
  std::optional<LoadReport> Load(const KvTransferParams& offer,
                                 std::span<const LogicalBlockId> blocks, int32_t n) {
    ConnectorMetadata meta;
    meta.loads.push_back({offer.remote_request_id, offer,
                          std::vector<LogicalBlockId>(blocks.begin(), blocks.end()), 0, n - 1});
    d.conn->worker()->BindMetadata(meta);
    d.conn->worker()->StartLoadKv();
    Deadline deadline = Deadline::AfterMs(10000);
    while (!deadline.Expired()) {
      ConnectorOutput o = d.conn->worker()->GetFinished();
      if (!o.load_reports.empty()) return o.load_reports[0];
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::nullopt;
  }
};

TEST(FerryConnectorExternalSchedulerTest, HoldsAndSavesFromMetadataMoveExactBytes) {
  for (bool host_buffer : {false, true}) {
    SCOPED_TRACE(host_buffer ? "host buffer" : "direct");
    External e(host_buffer);
    auto pblocks = Ids({3, 8});
    auto dblocks = Ids({10, 11});
    KvTransferParams offer = e.Prefill("x1", pblocks, 100, 21);
    e.Hold(offer, offer.remote_block_generations);
    std::optional<LoadReport> r = e.Load(offer, dblocks, 100);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->outcome, LoadOutcome::kPulled) << r->error;
    EXPECT_GT(r->bytes, 0u);
    EXPECT_TRUE(e.d.Holds(21, dblocks, 0, 99));
    EXPECT_TRUE(WaitSent(e.p, "x1"));  // D's notification ended the hold
    EXPECT_EQ(e.p.conn->Stats().leases_released_by_notification, 1u);
    if (host_buffer) {
      EXPECT_GT(e.p.conn->Stats().staged_kernel_blocks, 0u);
    }
  }
}

// D's notification comes before P's worker got the hold (vLLM ships it a step later): it is
// kept, and the hold ends as soon as it arrives instead of at lease end.
TEST(FerryConnectorExternalSchedulerTest, NotificationBeforeItsHoldEndsTheHoldOnArrival) {
  External e(false);
  auto blocks = Ids({5});
  KvTransferParams offer = e.Prefill("early", blocks, 40, 5);
  std::optional<LoadReport> r = e.Load(offer, Ids({6}), 40);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->outcome, LoadOutcome::kPulled) << r->error;
  // Let the notification reach P, which holds nothing yet.
  ASSERT_TRUE(WaitStats(e.p, [](const ConnectorStats& s) {  // the path under test
    return s.notifications_before_hold > 0;
  }));
  e.Hold(offer, offer.remote_block_generations);
  EXPECT_TRUE(WaitSent(e.p, "early"));
  EXPECT_EQ(e.p.conn->Stats().blocks_held, 0);
}

// D's release reaches P over the side channel before P's worker got the hold (a split P's
// replica rank, told when the pull starts): it is kept, and the hold ends on arrival instead of
// at the lease's end.
TEST(FerryConnectorExternalSchedulerTest, ReleaseBeforeItsHoldEndsTheHoldOnArrival) {
  External e(false);
  KvTransferParams offer = e.Prefill("early-rel", Ids({1, 2}), 100, 3);
  ConnectorMetadata meta;
  meta.releases.push_back(offer);
  e.d.conn->worker()->BindMetadata(meta);
  ASSERT_TRUE(WaitStats(e.p, [](const ConnectorStats& s) { return s.releases_before_hold > 0; }));
  e.Hold(offer, offer.remote_block_generations);
  EXPECT_TRUE(WaitSent(e.p, "early-rel"));
  EXPECT_EQ(e.p.conn->Stats().blocks_held, 0);
  EXPECT_EQ(e.p.conn->Stats().leases_expired, 0u);
}

// The scheduler promised generations P's worker does not hold: the hold ends at once and D,
// comparing what it read with the promise, recomputes.
TEST(FerryConnectorExternalSchedulerTest, OtherGenerationsThanPromisedEndTheHold) {
  External e(false);
  auto blocks = Ids({2, 4});
  KvTransferParams offer = e.Prefill("gen", blocks, 100, 9);
  std::vector<uint64_t> wrong = offer.remote_block_generations;
  wrong[1] += 5;
  offer.remote_block_generations = wrong;  // what D was told
  e.Hold(offer, wrong);
  EXPECT_TRUE(WaitSent(e.p, "gen"));
  std::optional<LoadReport> r = e.Load(offer, Ids({7, 8}), 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->outcome, LoadOutcome::kFailedGeneration);
  EXPECT_NE(r->error.find("generation"), std::string::npos) << r->error;
  // D's notification comes after the hold ended: late, not kept for a hold to come.
  EXPECT_TRUE(WaitStats(e.p, [](const ConnectorStats& s) { return s.notifications_late > 0; }));
  EXPECT_EQ(e.p.conn->Stats().notifications_before_hold, 0u);
}

// A chunk whose copy into the host buffer failed: the hold ends at once, and D recomputes.
TEST(FerryConnectorExternalSchedulerTest, AHoldWhoseStagingFailedEndsAtOnce) {
  External e(true);
  static_cast<internal::FerryConnectorImpl*>(e.p.conn.get())->stage_fault_for_test =
      [](const std::string&, int32_t token_begin) { return token_begin > 0; };
  KvTransferParams offer = e.Prefill("stage", Ids({1, 2}), 100, 4);
  e.Hold(offer, offer.remote_block_generations);
  EXPECT_TRUE(WaitSent(e.p, "stage"));
  EXPECT_EQ(e.p.conn->Stats().stage_failures, 1u);
  std::optional<LoadReport> r = e.Load(offer, Ids({3, 4}), 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->outcome, LoadOutcome::kFailedGeneration);
}

// D's metadata gives an offer back (its own prefix cache held the prompt): P's hold ends now.
TEST(FerryConnectorExternalSchedulerTest, ReleaseFromMetadataEndsPsHold) {
  External e(false);
  KvTransferParams offer = e.Prefill("rel", Ids({1, 2}), 100, 3);
  e.Hold(offer, offer.remote_block_generations);
  ConnectorMetadata meta;
  meta.releases.push_back(offer);
  e.d.conn->worker()->BindMetadata(meta);
  EXPECT_TRUE(WaitSent(e.p, "rel"));
  EXPECT_EQ(e.d.conn->Stats().notify_only, 1u);
}

}  // namespace
}  // namespace kvferry::connector
