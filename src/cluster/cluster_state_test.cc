// ClusterState without processes: membership, probes, in-flight accounting, ejection, reports.
#include "cluster/cluster_state.h"

#include <gtest/gtest.h>

#include <set>

namespace kvferry::cluster {
namespace {

MemberInfo Member(std::string id, MemberRole role) {
  MemberInfo m;
  m.id = m.engine_id = id;
  m.role = role;
  m.url = "http://127.0.0.1:" + std::to_string(9000 + (id[0] == 'p' ? 0 : 100) + (id[1] - '0'));
  return m;
}

MemberLoad Load(int64_t pending, int32_t running) {
  MemberLoad l;
  l.pending_prefill_tokens = pending;
  l.running = running;
  l.free_kv_blocks = l.total_kv_blocks = 1000;
  return l;
}

class ClusterStateTest : public ::testing::Test {
 protected:
  ClusterStateTest()
      : state_(RoutingConfig{}, HealthPolicy{2, 100, 1000}, true, [this] { return now_; }) {
    state_.SetMembers({Member("p0", MemberRole::kPrefill), Member("p1", MemberRole::kPrefill),
                       Member("d0", MemberRole::kDecode)});
  }
  void PollAll(int64_t pending = 0) {
    for (const auto& t : state_.PollTargets(now_))
      state_.OnPoll(t.id, t.url, Load(pending, 0), now_);
  }
  std::string PickId(Leg leg, const RouteRequest& r = {}, std::vector<std::string> exclude = {}) {
    auto route = state_.Pick(leg, r, exclude, "");
    EXPECT_TRUE(route.ok()) << route.status();
    return route.ok() ? (*route)->member_id() : "";
  }
  std::string PickD(const std::string& prefill_member) {
    auto route = state_.Pick(Leg::kDecode, {}, {}, prefill_member);
    EXPECT_TRUE(route.ok()) << route.status();
    return route.ok() ? (*route)->member_id() : "";
  }
  ClusterState::Clock::time_point now_{};
  ClusterState state_;
};

TEST_F(ClusterStateTest, JoiningMembersAreUsedOnlyWhenNothingElseIs) {
  auto r = state_.Pick(Leg::kPrefill, {}, {}, "");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)->routable());  // nothing probed yet: the best unhealthy one
  state_.OnPoll("p1", Member("p1", MemberRole::kPrefill).url, Load(0, 0), now_);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(PickId(Leg::kPrefill), "p1");
}

TEST_F(ClusterStateTest, BothLegsAreHealthyOnceAPAndADAnsweredAProbe) {
  EXPECT_FALSE(state_.BothLegsHealthy());  // listed, not probed
  state_.OnPoll("p1", Member("p1", MemberRole::kPrefill).url, Load(0, 0), now_);
  EXPECT_FALSE(state_.BothLegsHealthy());  // no D yet
  state_.OnPoll("d0", Member("d0", MemberRole::kDecode).url, Load(0, 0), now_);
  EXPECT_TRUE(state_.BothLegsHealthy());
}

TEST_F(ClusterStateTest, InFlightLegsCountAsLoadUntilFinished) {
  PollAll();
  RouteRequest big;
  big.prompt_bytes = 3000;
  auto first = state_.Pick(Leg::kPrefill, big, {}, "");
  ASSERT_TRUE(first.ok());
  const std::string busy = (*first)->member_id();
  EXPECT_NE(PickId(Leg::kPrefill), busy);  // its 3,000 estimated tokens are still pending
  EXPECT_NE(PickId(Leg::kPrefill), busy);
  (*first)->Finish(Route::Outcome::kOk);
  first->reset();
  // Both idle again; the tie goes to the member routed fewer times (p0 and p1 got 2 and 1 or 1
  // and 2 legs): the other one.
  const auto members = state_.Members();
  std::string fewer;
  uint64_t least = ~0ull;
  for (const auto& m : members) {
    if (CanPrefill(m.info.role) && m.routed_prefill < least) {
      least = m.routed_prefill;
      fewer = m.info.id;
    }
  }
  EXPECT_EQ(PickId(Leg::kPrefill), fewer);
}

TEST_F(ClusterStateTest, ReportedLoadAndLocalInFlightTakeTheLarger) {
  PollAll();
  state_.OnPoll("p0", Member("p0", MemberRole::kPrefill).url, Load(5000, 0), now_);
  EXPECT_EQ(PickId(Leg::kPrefill), "p1");
  RouteRequest huge;
  huge.prompt_token_ids = 9000;
  auto held = state_.Pick(Leg::kPrefill, huge, {}, "");  // p1: 9,000 in flight > p0's 5,000
  ASSERT_TRUE(held.ok());
  EXPECT_EQ((*held)->member_id(), "p1");
  EXPECT_EQ(PickId(Leg::kPrefill), "p0");
}

TEST_F(ClusterStateTest, FailedRequestsEjectAndAProbeBringsBack) {
  PollAll();
  for (int i = 0; i < 2; ++i) {
    auto r = state_.Pick(Leg::kPrefill, {}, {"p1"}, "");
    ASSERT_EQ((*r)->member_id(), "p0");
    (*r)->Finish(Route::Outcome::kFailed);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(PickId(Leg::kPrefill), "p1");
  EXPECT_NE(state_.RenderMetrics().find("kvferry:proxy_member_ejections_total{member=\"p0\"} 1"),
            std::string::npos);
  now_ += std::chrono::milliseconds(100);
  bool probed = false;
  for (const auto& t : state_.PollTargets(now_)) probed = probed || t.id == "p0";
  ASSERT_TRUE(probed);
  state_.OnPoll("p0", Member("p0", MemberRole::kPrefill).url, Load(0, 0), now_);
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) seen.insert(PickId(Leg::kPrefill));
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(ClusterStateTest, NeutralOutcomesDoNotEject) {
  PollAll();
  for (int i = 0; i < 5; ++i) {
    auto r = state_.Pick(Leg::kDecode, {}, {}, "");
    (*r)->Finish(Route::Outcome::kNeutral);
  }
  EXPECT_NE(state_.RenderMetrics().find("kvferry:proxy_member_up{member=\"d0\",role=\"decode\","
                                        "url=\"http://127.0.0.1:9100\"} 1"),
            std::string::npos)
      << state_.RenderMetrics();
  EXPECT_NE(
      state_.RenderMetrics().find(
          "kvferry:proxy_member_requests_total{member=\"d0\",leg=\"decode\",outcome=\"other\"} 5"),
      std::string::npos);
}

TEST_F(ClusterStateTest, LeavingAndRejoiningElsewhereStartsOver) {
  PollAll();
  EXPECT_EQ(PickId(Leg::kPrefill, {}, {"p0"}), "p1");
  auto in_flight = state_.Pick(Leg::kDecode, {}, {}, "");
  ASSERT_TRUE(in_flight.ok());
  MemberInfo moved = Member("d0", MemberRole::kDecode);
  moved.url = "http://127.0.0.1:1";
  state_.SetMembers({Member("p0", MemberRole::kPrefill), moved});
  (*in_flight)->Finish(Route::Outcome::kFailed);  // counts for d0, touches nobody's in-flight
  for (const auto& m : state_.Members()) {
    if (m.info.id == "d0") {
      EXPECT_EQ(m.state, MemberHealth::State::kJoining);
      EXPECT_EQ(m.inflight_decode, 0);
    }
  }
  EXPECT_EQ(state_.Members().size(), 2u);
  EXPECT_NE(state_.RenderMetrics().find(
                "kvferry:proxy_member_requests_total{member=\"p1\",leg=\"prefill\",outcome"),
            std::string::npos);  // p1 left; its counters stay
}

TEST_F(ClusterStateTest, NoMemberOfARoleIsUnavailableSayingWhy) {
  state_.SetMembers({Member("p0", MemberRole::kPrefill)});
  auto r = state_.Pick(Leg::kDecode, {}, {}, "");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no decode instance"), std::string::npos);
  EXPECT_NE(r.status().message().find("registry is unreachable"), std::string::npos);
  state_.SetRegistryConnected(true);
  EXPECT_NE(state_.Pick(Leg::kDecode, {}, {}, "").status().message().find("none registered"),
            std::string::npos);
  EXPECT_NE(state_.Pick(Leg::kPrefill, {}, {"p0"}, "").status().message().find("every prefill"),
            std::string::npos);
}

// A kvferry-engine pair and a vLLM pair behind one proxy: a D is always of its P's engine.
TEST_F(ClusterStateTest, ADecodeInstanceRunsItsPrefillInstancesEngine) {
  state_.SetMembers({Member("p0", MemberRole::kPrefill), Member("p1", MemberRole::kPrefill),
                     Member("d0", MemberRole::kDecode), Member("d1", MemberRole::kDecode)});
  auto poll = [&](const std::string& id, EngineKind engine, int32_t running) {
    MemberLoad l = Load(0, running);
    l.engine = engine;
    const MemberRole role = id[0] == 'p' ? MemberRole::kPrefill : MemberRole::kDecode;
    state_.OnPoll(id, Member(id, role).url, l, now_);
  };
  // Not polled yet: nothing is known, so nothing constrains the pair.
  EXPECT_TRUE(state_.Pick(Leg::kDecode, {}, {}, "p0").ok());
  poll("p0", EngineKind::kKvferry, 0);
  poll("p1", EngineKind::kVllm, 0);
  poll("d0", EngineKind::kKvferry, 5);  // busier: least-loaded routing alone would avoid it
  poll("d1", EngineKind::kVllm, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(PickD("p0"), "d0");
    EXPECT_EQ(PickD("p1"), "d1");
  }
  // A failed poll keeps the engine it named; with d1 gone, a vLLM P has no D left.
  state_.OnPoll("d1", Member("d1", MemberRole::kDecode).url,
                StatusOr<MemberLoad>(UnavailableError("down")), now_);
  for (const auto& m : state_.Members()) {
    if (m.info.id == "d1") {
      EXPECT_EQ(m.engine, EngineKind::kVllm);
    }
  }
  state_.SetMembers({Member("p0", MemberRole::kPrefill), Member("p1", MemberRole::kPrefill),
                     Member("d0", MemberRole::kDecode)});
  auto none = state_.Pick(Leg::kDecode, {}, {}, "p1");
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("no decode instance runs the prefill instance's "
                                         "engine (vllm); 1 decode instance(s) run another"),
            std::string::npos)
      << none.status();
  EXPECT_NE(state_.RenderTable().find("\"engine\":\"vllm\""), std::string::npos);
}

TEST_F(ClusterStateTest, RegistryStateIsReported) {
  state_.SetRegistryConnected(true);
  state_.SetRegistryConnected(false);
  state_.CountRegistryEvent("invalid");
  const std::string m = state_.RenderMetrics();
  EXPECT_NE(m.find("kvferry:proxy_registry_connected 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("kvferry:proxy_registry_disconnects_total 1\n"), std::string::npos);
  EXPECT_NE(m.find("kvferry:proxy_registry_events_total{kind=\"invalid\"} 1\n"), std::string::npos);
  EXPECT_NE(state_.RenderTable().find("\"connected\":false"), std::string::npos);
}

TEST_F(ClusterStateTest, UpstreamAuthFailuresAreCountedPerUpstream) {
  const std::string none = state_.RenderMetrics();
  EXPECT_NE(none.find("# TYPE kvferry:proxy_upstream_auth_failures_total counter\n"),
            std::string::npos)
      << none;
  EXPECT_EQ(none.find("kvferry:proxy_upstream_auth_failures_total{"), std::string::npos);
  EXPECT_EQ(state_.CountUpstreamAuthFailure("127.0.0.1:9000"), 1u);
  EXPECT_EQ(state_.CountUpstreamAuthFailure("127.0.0.1:9000"), 2u);
  EXPECT_EQ(state_.CountUpstreamAuthFailure("127.0.0.1:9100"), 1u);
  const std::string m = state_.RenderMetrics();
  EXPECT_NE(m.find("kvferry:proxy_upstream_auth_failures_total{upstream=\"127.0.0.1:9000\"} 2\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("kvferry:proxy_upstream_auth_failures_total{upstream=\"127.0.0.1:9100\"} 1\n"),
            std::string::npos);
}

TEST_F(ClusterStateTest, TokensPerByteIsLearned) {
  PollAll();
  state_.ObservePromptTokens(400, 100);
  RouteRequest r;
  r.prompt_bytes = 4000;  // ~1,000 tokens now
  auto a = state_.Pick(Leg::kPrefill, r, {}, "");
  state_.OnPoll("p0", Member("p0", MemberRole::kPrefill).url, Load(1100, 0), now_);
  state_.OnPoll("p1", Member("p1", MemberRole::kPrefill).url, Load(1100, 0), now_);
  // The member holding the estimated 1,000 tokens reports 1,100 like the other: a tie on load,
  // broken by fewer legs routed.
  EXPECT_NE(PickId(Leg::kPrefill), (*a)->member_id());
}

}  // namespace
}  // namespace kvferry::cluster
