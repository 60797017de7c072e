// The routing policy as a pure function: no processes, no clocks.
#include "kvferry/cluster/routing.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace kvferry::cluster {
namespace {

Candidate P(std::string_view id, int64_t pending) {
  Candidate c;
  c.id = id;
  c.pending_prefill_tokens = pending;
  return c;
}

Candidate D(std::string_view id, int32_t seqs, int64_t free, int64_t total) {
  Candidate c;
  c.id = id;
  c.num_seqs = seqs;
  c.free_kv_blocks = free;
  c.total_kv_blocks = total;
  return c;
}

TEST(RoutingTest, PrefillWithoutAffinityGoesToTheLeastPendingTokens) {
  const std::vector<Candidate> ps = {P("p0", 900), P("p1", 100), P("p2", 400)};
  auto c = ChoosePrefill(std::nullopt, ps, {});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index, 1u);
  EXPECT_EQ(c->reason, RouteReason::kLeastLoaded);
}

TEST(RoutingTest, TiesGoToTheLeastRecentlyRoutedThenById) {
  std::vector<Candidate> ps = {P("p0", 0), P("p1", 0), P("p2", 0)};
  ps[0].last_routed = 7;
  ps[1].last_routed = 9;
  ps[2].last_routed = 8;
  EXPECT_EQ(ChoosePrefill(std::nullopt, ps, {})->index, 0u);
  ps[0].last_routed = 10;
  EXPECT_EQ(ChoosePrefill(std::nullopt, ps, {})->index, 2u);
  ps[2].last_routed = ps[1].last_routed = ps[0].last_routed = 0;  // never: by id
  EXPECT_EQ(ChoosePrefill(std::nullopt, ps, {})->index, 0u);
}

TEST(RoutingTest, TheSameKeyReachesTheSameMemberWhateverTheOrder) {
  const std::vector<Candidate> a = {P("p0", 0), P("p1", 0), P("p2", 0)};
  const std::vector<Candidate> b = {P("p2", 0), P("p0", 0), P("p1", 0)};
  for (uint64_t key = 1; key < 200; ++key) {
    auto ca = ChoosePrefill(key, a, {});
    auto cb = ChoosePrefill(key, b, {});
    ASSERT_TRUE(ca && cb);
    EXPECT_EQ(a[ca->index].id, b[cb->index].id) << key;
    EXPECT_EQ(ca->reason, RouteReason::kAffinity);
  }
}

TEST(RoutingTest, AffinityKeysSpreadOverTheMembers) {
  const std::vector<Candidate> ps = {P("p0", 0), P("p1", 0), P("p2", 0), P("p3", 0)};
  std::map<size_t, int> hits;
  for (uint64_t key = 0; key < 4000; ++key) ++hits[ChoosePrefill(key * 7919, ps, {})->index];
  ASSERT_EQ(hits.size(), 4u);
  for (const auto& [i, n] : hits) EXPECT_GT(n, 800) << ps[i].id;  // 1,000 expected each
}

TEST(RoutingTest, AMemberLeavingMovesOnlyItsOwnKeys) {
  const std::vector<Candidate> all = {P("p0", 0), P("p1", 0), P("p2", 0)};
  const std::vector<Candidate> without_p1 = {P("p0", 0), P("p2", 0)};
  int moved = 0;
  for (uint64_t key = 0; key < 1000; ++key) {
    const std::string_view before = all[ChoosePrefill(key, all, {})->index].id;
    const std::string_view after = without_p1[ChoosePrefill(key, without_p1, {})->index].id;
    if (before != "p1") {
      EXPECT_EQ(before, after) << key;
    } else {
      ++moved;
    }
  }
  EXPECT_GT(moved, 0);
}

TEST(RoutingTest, AnOverloadedAffinityMemberIsSkippedForTheLeastLoaded) {
  RoutingConfig config;
  config.affinity_max_imbalance_tokens = 1000;
  std::vector<Candidate> ps = {P("p0", 0), P("p1", 0)};
  const uint64_t key = 42;
  const size_t home = ChoosePrefill(key, ps, config)->index;
  const size_t other = 1 - home;
  ps[home].pending_prefill_tokens = 1000;  // exactly the allowed imbalance: still home
  EXPECT_EQ(ChoosePrefill(key, ps, config)->index, home);
  ps[home].pending_prefill_tokens = 1001;
  auto c = ChoosePrefill(key, ps, config);
  EXPECT_EQ(c->index, other);
  EXPECT_EQ(c->reason, RouteReason::kAffinityOverloaded);
  ps[other].pending_prefill_tokens = 500;  // imbalance back within bounds
  EXPECT_EQ(ChoosePrefill(key, ps, config)->index, home);
}

TEST(RoutingTest, ExcludedMembersAreNeverChosen) {
  std::vector<Candidate> ps = {P("p0", 0), P("p1", 50)};
  ps[0].excluded = true;
  for (uint64_t key = 0; key < 50; ++key) EXPECT_EQ(ChoosePrefill(key, ps, {})->index, 1u);
  ps[1].excluded = true;
  EXPECT_FALSE(ChoosePrefill(std::nullopt, ps, {}));
  EXPECT_FALSE(ChooseDecode(ps, {}));
}

TEST(RoutingTest, UnroutableMembersOnlyWhenNoRoutableIsLeft) {
  std::vector<Candidate> ps = {P("p0", 0), P("p1", 5000)};
  ps[0].routable = false;
  auto c = ChoosePrefill(std::nullopt, ps, {});
  EXPECT_EQ(c->index, 1u);
  EXPECT_TRUE(c->routable);
  ps[1].routable = false;
  c = ChoosePrefill(std::nullopt, ps, {});
  EXPECT_EQ(c->index, 0u);
  EXPECT_FALSE(c->routable);
}

TEST(RoutingTest, AvoidedMemberOnlyAsALastResort) {
  std::vector<Candidate> ds = {D("d0", 0, 100, 100), D("d1", 9, 10, 100)};
  ds[0].avoid = true;
  EXPECT_EQ(ChooseDecode(ds, {})->index, 1u);
  ds[1].excluded = true;
  EXPECT_EQ(ChooseDecode(ds, {})->index, 0u);
}

TEST(RoutingTest, DecodeGoesToTheFewestSequencesThenTheMostFreeBlocks) {
  std::vector<Candidate> ds = {D("d0", 3, 900, 1000), D("d1", 1, 100, 1000), D("d2", 1, 400, 1000)};
  EXPECT_EQ(ChooseDecode(ds, {})->index, 2u);
  ds[2].num_seqs = 2;
  EXPECT_EQ(ChooseDecode(ds, {})->index, 1u);
}

TEST(RoutingTest, DecodeSkipsMembersWithoutKvHeadroom) {
  RoutingConfig config;
  config.min_free_kv_fraction = 0.1;
  std::vector<Candidate> ds = {D("d0", 0, 50, 1000), D("d1", 7, 300, 1000)};
  EXPECT_EQ(ChooseDecode(ds, config)->index, 1u);
  ds[1].free_kv_blocks = 20;  // nobody has headroom: fewest sequences again
  EXPECT_EQ(ChooseDecode(ds, config)->index, 0u);
  ds[0].total_kv_blocks = 0;  // unknown capacity is not filtered
  ds[0].num_seqs = 8;
  ds[1].free_kv_blocks = 300;
  EXPECT_EQ(ChooseDecode(ds, config)->index, 1u);
}

TEST(RoutingTest, NoMembersNoChoice) {
  EXPECT_FALSE(ChoosePrefill(1, {}, {}));
  EXPECT_FALSE(ChooseDecode({}, {}));
}

}  // namespace
}  // namespace kvferry::cluster

namespace kvferry::cluster {
namespace {

Candidate Held(Candidate c, int64_t cached) {
  c.cached_tokens = cached;
  return c;
}

RoutingConfig Mode(RoutingMode mode) {
  RoutingConfig c;
  c.mode = mode;
  return c;
}

TEST(RoutingModesTest, KvWeighsUncachedTokensAgainstTheQueue) {
  // 1000-token prompt: p0 holds 800 but has 500 queued (cost 700); p1 holds none, idle (1000);
  // p2 holds 400 with 100 queued (700, routed earlier than p0: it wins the tie).
  std::vector<Candidate> ps = {Held(P("p0", 500), 800), Held(P("p1", 0), 0),
                               Held(P("p2", 100), 400)};
  ps[0].last_routed = 5;
  ps[2].last_routed = 3;
  auto c = ChoosePrefill(std::nullopt, ps, Mode(RoutingMode::kKv), 1000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index, 2u);
  EXPECT_EQ(c->reason, RouteReason::kKvHit);
  // A longer queue on p2 sends the prompt to the idle member that holds nothing.
  ps[2].pending_prefill_tokens = 900;
  ps[0].pending_prefill_tokens = 900;
  c = ChoosePrefill(std::nullopt, ps, Mode(RoutingMode::kKv), 1000);
  EXPECT_EQ(c->index, 1u);
  EXPECT_EQ(c->reason, RouteReason::kKvMiss);
}

TEST(RoutingModesTest, KvWithoutHoldingsRoutesAsAffinity) {
  const std::vector<Candidate> ps = {P("p0", 0), P("p1", 0), P("p2", 0)};
  const uint64_t key = 12345;
  auto kv = ChoosePrefill(key, ps, Mode(RoutingMode::kKv), 1000);
  auto affinity = ChoosePrefill(key, ps, Mode(RoutingMode::kAffinity), 1000);
  ASSERT_TRUE(kv && affinity);
  EXPECT_EQ(kv->index, affinity->index);
  EXPECT_EQ(kv->reason, RouteReason::kAffinity);
  // Holdings known but no prompt length: affinity too.
  const std::vector<Candidate> held = {Held(P("p0", 0), 16), Held(P("p1", 0), 0)};
  EXPECT_EQ(ChoosePrefill(key, held, Mode(RoutingMode::kKv), -1)->reason, RouteReason::kAffinity);
}

TEST(RoutingModesTest, LeastLoadedIgnoresAffinityAndRoundRobinIgnoresLoad) {
  std::vector<Candidate> ps = {P("p0", 900), P("p1", 100)};
  ps[1].last_routed = 4;
  EXPECT_EQ(ChoosePrefill(7, ps, Mode(RoutingMode::kLeastLoaded))->index, 1u);
  auto rr = ChoosePrefill(7, ps, Mode(RoutingMode::kRoundRobin));
  EXPECT_EQ(rr->index, 0u);
  EXPECT_EQ(rr->reason, RouteReason::kRoundRobin);
  std::vector<Candidate> ds = {D("d0", 9, 10, 100), D("d1", 0, 90, 100)};
  ds[1].last_routed = 2;
  EXPECT_EQ(ChooseDecode(ds, Mode(RoutingMode::kRoundRobin))->index, 0u);
}

TEST(RoutingModesTest, KvDecodePrefersTheHolderAmongTheLeastBusy) {
  std::vector<Candidate> ds = {Held(D("d0", 2, 50, 100), 0), Held(D("d1", 2, 10, 100), 64),
                               Held(D("d2", 1, 10, 100), 0)};
  EXPECT_EQ(ChooseDecode(ds, Mode(RoutingMode::kKv))->index, 2u);  // sequences first
  ds[2].num_seqs = 2;
  auto c = ChooseDecode(ds, Mode(RoutingMode::kKv));
  EXPECT_EQ(c->index, 1u);
  EXPECT_EQ(c->reason, RouteReason::kKvHit);
  EXPECT_EQ(ChooseDecode(ds, Mode(RoutingMode::kAffinity))->index, 0u);  // most free blocks
}

TEST(RoutingModesTest, ModeNamesRoundTrip) {
  for (RoutingMode m : {RoutingMode::kKv, RoutingMode::kAffinity, RoutingMode::kLeastLoaded,
                        RoutingMode::kRoundRobin}) {
    EXPECT_EQ(*ParseRoutingMode(RoutingModeName(m)), m);
  }
  EXPECT_EQ(ParseRoutingMode("random").status().code(), StatusCode::kInvalidArgument);
}

MemberInfo LendingMember(const std::string& id, const std::string& kv_role,
                         int32_t block_size = 16) {
  MemberInfo m;
  m.id = id;
  m.url = "http://127.0.0.1:1";
  m.kv_role = kv_role;
  m.block_size = block_size;
  return m;
}

TEST(PrefixSourceTest, TheSourceHoldsTheMostAndEnoughMoreThanP) {
  const MemberInfo p = LendingMember("p0", "kv_both");
  const std::vector<MemberInfo> members = {p, LendingMember("p1", "kv_producer"),
                                           LendingMember("p2", "kv_both"),
                                           LendingMember("d0", "kv_consumer")};
  std::map<std::string, int64_t> held = {{"p0", 16}, {"p1", 64}, {"p2", 96}, {"d0", 200}};
  auto s = ChoosePrefixSource(p, held, members, 200, 32);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->member_id, "p2");  // d0 holds more but cannot lend (kv_consumer)
  EXPECT_EQ(s->tokens, 96);
  EXPECT_FALSE(ChoosePrefixSource(p, held, members, 200, 96).has_value());  // 80 more only
  // P that cannot load (kv_producer), or no threshold: never.
  EXPECT_FALSE(ChoosePrefixSource(LendingMember("p0", "kv_producer"), held, members, 200, 32));
  EXPECT_FALSE(ChoosePrefixSource(p, held, members, 200, 0));
}

TEST(PrefixSourceTest, TheLeaseNeverCoversThePromptsLastTokenAndIsWholeBlocks) {
  const MemberInfo p = LendingMember("p0", "kv_both");
  const std::vector<MemberInfo> members = {p, LendingMember("p1", "kv_both")};
  // p1 holds all 64 tokens of a 64-token prompt: 48 can be lent (the last token is computed,
  // and the block holding it is not whole without it).
  auto s = ChoosePrefixSource(p, {{"p1", 64}}, members, 64, 16);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->tokens, 48);
  auto odd = ChoosePrefixSource(p, {{"p1", 40}}, members, 100, 16);  // index counts in blocks
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(odd->tokens, 32);
}

}  // namespace
}  // namespace kvferry::cluster
