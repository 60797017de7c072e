// LoadPoller against real HTTP servers: figures reach the table, and a member whose read hangs
// does not hold up the others (no clocks asserted: the hanging handler is released by the test).
#include "cluster/load_poller.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "cluster/testing/eventually.h"
#include "http/testing/test_server.h"

namespace kvferry::cluster {
namespace {

using testing::Eventually;

// A member's /metrics answering `body()`, counting its reads.
struct MetricsServer {
  explicit MetricsServer(std::function<std::string()> body)
      : http([this, body](httplib::Server& s) {
          s.Get("/metrics", [this, body](const httplib::Request&, httplib::Response& res) {
            ++reads;
            res.set_content(body(), "text/plain");
          });
        }) {}
  std::string url() const { return http.url(); }
  std::atomic<int> reads{0};  // before `http`: its handlers count into it
  http::testing::TestServer http;
};

MemberInfo PolledMember(const std::string& id, const std::string& url) {
  MemberInfo m;
  m.id = id;
  m.url = url;
  m.role = MemberRole::kPrefill;
  return m;
}

std::optional<MemberLoad> LoadOf(const ClusterState& s, const std::string& id) {
  for (const auto& m : s.Members()) {
    if (m.info.id == id && m.state == MemberHealth::State::kHealthy) return m.load;
  }
  return std::nullopt;
}

TEST(LoadPollerTest, AHangingMemberDoesNotHoldUpTheOthers) {
  std::atomic<bool> release{false};
  MetricsServer fast([] { return std::string("kvferry:pending_prefill_tokens 7\n"); });
  MetricsServer hangs([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!release && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return std::string("kvferry:pending_prefill_tokens 9\n");
  });
  ClusterState state({}, {}, false);
  state.SetMembers({PolledMember("fast", fast.url()), PolledMember("hangs", hangs.url())});
  auto poller = LoadPoller::Start({/*interval_ms=*/10, /*timeout_ms=*/30000}, &state);
  ASSERT_TRUE(Eventually([&] { return hangs.reads == 1; }));
  const int before = fast.reads;
  ASSERT_TRUE(Eventually([&] { return fast.reads >= before + 5; }));  // rounds go on
  EXPECT_EQ(hangs.reads, 1);  // its read is in flight: not issued again
  ASSERT_TRUE(LoadOf(state, "fast").has_value());
  EXPECT_EQ(LoadOf(state, "fast")->pending_prefill_tokens, 7);
  EXPECT_FALSE(LoadOf(state, "hangs").has_value());
  release = true;
  ASSERT_TRUE(Eventually([&] { return LoadOf(state, "hangs").has_value(); }));
  EXPECT_EQ(LoadOf(state, "hangs")->pending_prefill_tokens, 9);
  poller->Stop();
}

TEST(LoadPollerTest, AnyAnswerIsAliveOnlyA200CarriesFigures) {
  MetricsServer ok([] { return std::string("kvferry:num_requests{state=\"running\"} 3\n"); });
  http::testing::TestServer no_metrics;  // answers 404 to /metrics
  ClusterState state({}, {}, false);
  state.SetMembers({PolledMember("ok", ok.url()), PolledMember("plain", no_metrics.url()),
                    PolledMember("dead", "http://127.0.0.1:1")});
  auto poller = LoadPoller::Start({10, 1000}, &state);
  ASSERT_TRUE(Eventually([&] { return LoadOf(state, "ok") && LoadOf(state, "plain"); }));
  EXPECT_EQ(LoadOf(state, "ok")->running, 3);
  EXPECT_EQ(*LoadOf(state, "plain"), MemberLoad{});
  EXPECT_FALSE(LoadOf(state, "dead").has_value());
  poller->Stop();
}

}  // namespace
}  // namespace kvferry::cluster
