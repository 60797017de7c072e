// The registry against a real etcd on loopback (tests only start it; nothing is mocked):
// the JSON-gateway client, the watch stream, a Registrar and a RegistryWatcher, and what
// happens when etcd stops and comes back.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "cluster/cluster_state.h"
#include "cluster/etcd_client.h"
#include "cluster/etcd_watch.h"
#include "cluster/registry_watcher.h"
#include "cluster/testing/etcd_process.h"
#include "cluster/testing/eventually.h"
#include "kvferry/cluster/registrar.h"

namespace kvferry::cluster {
namespace {

using testing::EtcdProcess;

using testing::Eventually;

MemberInfo Member(std::string id, MemberRole role, int port) {
  MemberInfo m;
  m.id = m.engine_id = std::move(id);
  m.role = role;
  m.url = "http://127.0.0.1:" + std::to_string(port);
  m.model = "tiny";
  return m;
}

RegistryAddress AddressOf(const EtcdProcess& etcd, const std::string& ns = "test") {
  auto a = ParseRegistryUrl(etcd.url() + "/" + ns);
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

// A listener that records what the watcher says.
class Recorder : public RegistryListener {
 public:
  void SetMembers(std::vector<MemberInfo> members) override {
    MutexLock lock(&mu_);
    members_ = std::move(members);
  }
  void SetRegistryConnected(bool connected) override {
    MutexLock lock(&mu_);
    connected_ = connected;
  }
  void CountRegistryEvent(std::string_view kind) override {
    MutexLock lock(&mu_);
    ++events_[std::string(kind)];
  }
  std::vector<std::string> ids() {
    MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& m : members_) out.push_back(m.id);
    return out;
  }
  bool connected() {
    MutexLock lock(&mu_);
    return connected_;
  }
  int events(const std::string& kind) {
    MutexLock lock(&mu_);
    return events_[kind];
  }

 private:
  Mutex mu_;
  std::vector<MemberInfo> members_ GUARDED_BY(mu_);
  bool connected_ GUARDED_BY(mu_) = false;
  std::map<std::string, int> events_ GUARDED_BY(mu_);
};

using Ids = std::vector<std::string>;

TEST(EtcdClientTest, KeysLeasesAndTransactions) {
  EtcdProcess etcd;
  EtcdClient c({etcd.endpoint()}, 2000);
  auto lease = c.GrantLease(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(c.Create("/t/a", "one", *lease).ok());
  EXPECT_EQ(c.Create("/t/a", "two", *lease).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(c.Put("/t/b", std::string("bin\0ary", 7)).ok());
  ASSERT_TRUE(c.Put("/u/c", "outside").ok());
  auto range = c.RangePrefix("/t/");
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].value, "one");
  EXPECT_EQ(range->kvs[0].lease, *lease);
  EXPECT_EQ(range->kvs[1].value, std::string("bin\0ary", 7));
  EXPECT_GT(range->revision, 0);
  auto ttl = c.KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(c.RevokeLease(*lease).ok());
  EXPECT_EQ(c.RangePrefix("/t/")->kvs.size(), 1u);  // the leased key went with its lease
  EXPECT_EQ(c.KeepAlive(*lease).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c.Delete("/t/b").ok());
  EXPECT_TRUE(c.RangePrefix("/t/")->kvs.empty());
}

TEST(EtcdClientTest, AnExpiredLeaseTakesItsKey) {
  EtcdProcess etcd;
  EtcdClient c({etcd.endpoint()}, 2000);
  auto lease = c.GrantLease(2);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(c.Create("/t/x", "v", *lease).ok());
  EXPECT_TRUE(Eventually([&] { return c.RangePrefix("/t/")->kvs.empty(); }));
}

TEST(EtcdClientTest, UnreachableEndpointsAreSkippedOrReported) {
  EtcdProcess etcd;
  EtcdClient both({{"127.0.0.1", 1}, etcd.endpoint()}, 1000);
  ASSERT_TRUE(both.Put("/t/k", "v").ok());
  EXPECT_EQ(both.current(), etcd.endpoint());  // later calls start with the one that answered
  EtcdClient none({{"127.0.0.1", 1}}, 500);
  EXPECT_EQ(none.Put("/t/k", "v").code(), StatusCode::kUnavailable);
  EXPECT_FALSE(none.Health().ok());
}

TEST(EtcdWatchTest, SeesPutsAndDeletesThenEndsWhenEtcdStops) {
  EtcdProcess etcd;
  EtcdClient c({etcd.endpoint()}, 2000);
  Mutex mu;
  std::vector<EtcdEvent> seen;
  EtcdWatch watch(
      etcd.endpoint(), "/w/", 1,
      [&](const std::vector<EtcdEvent>& events) {
        MutexLock lock(&mu);
        seen.insert(seen.end(), events.begin(), events.end());
      },
      1000);
  ASSERT_TRUE(Eventually([&] { return watch.created(); }));
  ASSERT_TRUE(c.Put("/w/a", "1").ok());
  ASSERT_TRUE(c.Put("/other", "x").ok());
  ASSERT_TRUE(c.Delete("/w/a").ok());
  ASSERT_TRUE(Eventually([&] {
    MutexLock lock(&mu);
    return seen.size() == 2;
  }));
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(seen[0].is_delete);
    EXPECT_EQ(seen[0].key, "/w/a");
    EXPECT_EQ(seen[0].value, "1");
    EXPECT_TRUE(seen[1].is_delete);
  }
  EXPECT_FALSE(watch.ended());
  etcd.Stop();
  EXPECT_TRUE(Eventually([&] { return watch.ended(); }));
  EXPECT_EQ(watch.status().code(), StatusCode::kUnavailable);
}

TEST(EtcdWatchTest, CancelEndsASilentWatchAtOnce) {
  EtcdProcess etcd;
  auto watch = std::make_unique<EtcdWatch>(
      etcd.endpoint(), "/w/", 1, [](const std::vector<EtcdEvent>&) {}, 1000);
  watch.reset();  // returns (the destructor cancels a stream that never speaks)
  EtcdWatch second(
      etcd.endpoint(), "/w/", 1, [](const std::vector<EtcdEvent>&) {}, 1000);
  ASSERT_TRUE(Eventually([&] { return second.created(); }));
  second.Cancel();
  EXPECT_TRUE(Eventually([&] { return second.ended(); }));
  EXPECT_EQ(second.status().code(), StatusCode::kAborted);
}

TEST(RegistryTest, MembersJoinAndLeaveThroughTheRegistry) {
  EtcdProcess etcd;
  Recorder rec;
  auto watcher = RegistryWatcher::Start({AddressOf(etcd), 500, 200, 200}, &rec);
  ASSERT_TRUE(Eventually([&] { return rec.connected(); }));
  auto p = Registrar::Start({AddressOf(etcd), 5}, Member("p0", MemberRole::kPrefill, 8100));
  auto d = Registrar::Start({AddressOf(etcd), 5}, Member("d0", MemberRole::kDecode, 8200));
  ASSERT_TRUE(p.ok() && d.ok());
  EXPECT_TRUE(Eventually([&] { return rec.ids() == Ids{"d0", "p0"}; }));
  // The watcher may see the key before the registrar's thread has marked itself registered.
  EXPECT_TRUE(Eventually([&] { return (*p)->registered(); }));
  // Another namespace is another cluster.
  auto other = Registrar::Start({AddressOf(etcd, "other"), 5}, Member("x", MemberRole::kBoth, 1));
  // A clean stop deletes the key at once (the lease is revoked, not left to run out): gone
  // when Stop() returns.
  (*d)->Stop();
  EtcdClient c({etcd.endpoint()}, 2000);
  auto range = c.RangePrefix(AddressOf(etcd).MembersPrefix());
  ASSERT_TRUE(range.ok());
  ASSERT_EQ(range->kvs.size(), 1u);
  EXPECT_EQ(range->kvs[0].key, AddressOf(etcd).MembersPrefix() + "p0");
  EXPECT_TRUE(Eventually([&] { return rec.ids() == Ids{"p0"}; }));
}

TEST(RegistryTest, TheSameIdIsNotTakenOverWhileItsLeaseLives) {
  EtcdProcess etcd;
  auto first = Registrar::Start({AddressOf(etcd), 5}, Member("p0", MemberRole::kPrefill, 8100));
  ASSERT_TRUE(Eventually([&] { return (*first)->registered(); }));
  RegistrarOptions o{AddressOf(etcd), 5};
  o.retry_interval_ms = 100;
  auto second = Registrar::Start(o, Member("p0", MemberRole::kPrefill, 9999));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE((*second)->registered());
  (*first)->Stop();  // the id is free: the second instance takes it
  EXPECT_TRUE(Eventually([&] { return (*second)->registered(); }));
  EtcdClient c({etcd.endpoint()}, 2000);
  auto range = c.RangePrefix(AddressOf(etcd).MembersPrefix());
  ASSERT_EQ(range->kvs.size(), 1u);
  EXPECT_NE(range->kvs[0].value.find("9999"), std::string::npos);
}

TEST(RegistryTest, GarbageValuesAreIgnoredAndCounted) {
  EtcdProcess etcd;
  const RegistryAddress a = AddressOf(etcd);
  EtcdClient c({etcd.endpoint()}, 2000);
  ASSERT_TRUE(c.Put(a.MembersPrefix() + "junk", "{not json").ok());
  ASSERT_TRUE(
      c.Put(a.MembersPrefix() + "nested/key", EncodeMember(Member("n", MemberRole::kBoth, 1)))
          .ok());
  Recorder rec;
  auto watcher = RegistryWatcher::Start({a, 500, 200, 200}, &rec);
  ASSERT_TRUE(Eventually([&] { return rec.connected(); }));
  ASSERT_TRUE(
      c.Put(a.MembersPrefix() + "p0", EncodeMember(Member("p0", MemberRole::kPrefill, 1))).ok());
  ASSERT_TRUE(c.Put(a.MembersPrefix() + "bad-role", R"({"version":1,"role":"boss"})").ok());
  EXPECT_TRUE(Eventually([&] { return rec.ids() == Ids{"p0"}; }));
  EXPECT_TRUE(Eventually([&] { return rec.events("invalid") == 3; }));
  // A valid member overwritten with garbage leaves.
  ASSERT_TRUE(c.Put(a.MembersPrefix() + "p0", "garbage").ok());
  EXPECT_TRUE(Eventually([&] { return rec.ids().empty(); }));
}

TEST(RegistryTest, EtcdGoingAwayKeepsTheLastMembersAndComingBackResumes) {
  EtcdProcess etcd;
  const RegistryAddress a = AddressOf(etcd);
  ClusterState state({}, {}, /*uses_registry=*/true);
  auto watcher = RegistryWatcher::Start({a, 300, 200, 200}, &state);
  RegistrarOptions ro{a, 4};
  ro.retry_interval_ms = 200;
  auto p = Registrar::Start(ro, Member("p0", MemberRole::kPrefill, 8100));
  ASSERT_TRUE(Eventually([&] { return state.Members().size() == 1; }));
  ASSERT_TRUE(state.registry_connected());

  etcd.Pause();  // a stalled etcd: the watch stream stays open, the health check notices
  EXPECT_TRUE(Eventually([&] { return !state.registry_connected(); }));
  EXPECT_EQ(state.Members().size(), 1u);  // still routed to
  EXPECT_NE(state.RenderMetrics().find("kvferry:proxy_registry_connected 0"), std::string::npos);
  etcd.Resume();
  EXPECT_TRUE(Eventually([&] { return state.registry_connected(); }));

  etcd.Stop();  // gone: connection refused
  EXPECT_TRUE(Eventually([&] { return !state.registry_connected(); }));
  EXPECT_EQ(state.Members().size(), 1u);
  etcd.Restart();  // same data: p0's lease and key are back, and the registrar keeps them
  EXPECT_TRUE(Eventually([&] { return state.registry_connected(); }));
  auto d = Registrar::Start(ro, Member("d0", MemberRole::kDecode, 8200));
  EXPECT_TRUE(Eventually([&] { return state.Members().size() == 2; }));  // the watch resumed
  EXPECT_TRUE(Eventually([&] { return (*p)->registered(); }));
  EXPECT_NE(state.RenderMetrics().find("kvferry:proxy_registry_disconnects_total 2"),
            std::string::npos)
      << state.RenderMetrics();
}

}  // namespace
}  // namespace kvferry::cluster
