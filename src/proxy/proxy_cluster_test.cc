// The proxy in front of several instances: retries, ejection, affinity, reports. Real
// OpenAiServers with fake engines, and small httplib servers that misbehave on purpose.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "http/testing/test_server.h"
#include "kvferry/proxy/proxy_server.h"
#include "kvferry/server/openai_server.h"
#include "server/testing/fake_instance.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

using Instance = server::testing::FakeInstance;

// An httplib server whose generation endpoint does what the test says; /metrics answers 200 so
// the proxy takes it for healthy.
struct Scripted : http::testing::TestServer {
  explicit Scripted(httplib::Server::Handler generate)
      : TestServer([&generate](httplib::Server& s) {
          s.Post("/v1/completions", std::move(generate));
          s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
            res.set_content("", "text/plain");
          });
        }) {}
};

std::unique_ptr<ProxyServer> StartPollingProxy(std::vector<std::string> p,
                                               std::vector<std::string> d) {
  ProxyOptions o;
  o.port = 0;
  o.prefill_urls = std::move(p);
  o.decode_urls = std::move(d);
  o.connect_timeout_ms = 1000;
  o.prefill_timeout_ms = 5000;
  o.decode_timeout_ms = 5000;
  o.poll_interval_ms = 50;
  auto proxy = ProxyServer::Create(o);
  EXPECT_TRUE(proxy.ok()) << proxy.status();
  EXPECT_TRUE((*proxy)->Start().ok());
  return std::move(proxy).value();
}

json Table(ProxyServer& proxy) {
  httplib::Client c("127.0.0.1", proxy.port());
  auto r = c.Get("/cluster");
  return r && r->status == 200 ? json::parse(r->body) : json();
}

// Waits (up to 10 s) until `n` members are healthy in the proxy's table.
bool WaitHealthy(ProxyServer& proxy, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    size_t healthy = 0;
    for (const json& m : Table(proxy).value("members", json::array())) {
      healthy += m["state"] == "healthy";
    }
    if (healthy == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string Metrics(ProxyServer& proxy) {
  httplib::Client c("127.0.0.1", proxy.port());
  auto r = c.Get("/metrics");
  return r ? r->body : "";
}

httplib::Result Complete(ProxyServer& proxy, const std::string& body) {
  httplib::Client c("127.0.0.1", proxy.port());
  c.set_read_timeout(std::chrono::seconds(20));
  return c.Post("/v1/completions", body, "application/json");
}

TEST(ProxyClusterTest, ADeadPrefillIsRetriedElsewhereAndEjected) {
  Instance p, d;
  std::unique_ptr<Instance> doomed = std::make_unique<Instance>();
  const std::string doomed_url = doomed->url();
  auto proxy = StartPollingProxy({doomed_url, p.url()}, {d.url()});
  ASSERT_TRUE(WaitHealthy(*proxy, 3));
  doomed.reset();  // gone before the poller notices: the first requests find it dead
  for (int i = 0; i < 6; ++i) {
    auto r = Complete(*proxy, R"({"prompt":"abc","max_tokens":3})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("X-Kvferry-Prefill"), p.url());
  }
  EXPECT_EQ(p.fake.submitted().size(), 6u);
  const std::string m = Metrics(*proxy);
  EXPECT_NE(m.find("kvferry:proxy_member_ejections_total{member=\"" + doomed_url + "\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("kvferry:proxy_member_up{member=\"" + doomed_url + "\",role=\"prefill\","),
            std::string::npos);
}

TEST(ProxyClusterTest, ADecodeFailingBeforeItsFirstTokenIsRetriedWithTheSameParams) {
  Instance p, d;
  std::vector<json> seen;
  Mutex mu;
  Scripted failing([&](const httplib::Request& req, httplib::Response& res) {
    MutexLock lock(&mu);
    seen.push_back(json::parse(req.body)["kv_transfer_params"]);
    res.status = 503;
    res.set_content(R"({"error":{"message":"draining","type":"x","param":null,"code":503}})",
                    "application/json");
  });
  auto proxy = StartPollingProxy({p.url()}, {failing.url(), d.url()});
  ASSERT_TRUE(WaitHealthy(*proxy, 3));
  int retried = 0;
  for (int i = 0; i < 4; ++i) {
    for (bool stream : {false, true}) {
      json body = {{"prompt", "hello"}, {"max_tokens", 4}, {"stream", stream}};
      auto r = Complete(*proxy, body.dump());
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      EXPECT_EQ(r->get_header_value("X-Kvferry-Decode"), d.url());
    }
  }
  MutexLock lock(&mu);
  retried = static_cast<int>(seen.size());
  ASSERT_GT(retried, 0);  // the 503 member was tried before it was ejected
  // The retried D got exactly the params the failing D got: P's lease is reused, not redone.
  const auto submitted = d.fake.submitted();
  std::set<std::string> params_on_d;
  for (const auto& s : submitted) params_on_d.insert(s.kv_transfer_params->remote_request_id);
  for (const json& j : seen) EXPECT_TRUE(params_on_d.contains(j["remote_request_id"])) << j;
  EXPECT_EQ(p.fake.submitted().size(), 8u);  // one prefill per request, retries or not
}

TEST(ProxyClusterTest, ADecodeDyingMidStreamEndsTheStreamWithAnErrorNotARetry) {
  Instance p, d;
  Scripted dies([](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      const std::string ev = R"(data: {"choices":[{"index":0,"text":"b"}]})"
                             "\n\n";
      sink.write(ev.data(), ev.size());
      return false;  // the connection drops after one token
    });
  });
  auto proxy = StartPollingProxy({p.url()}, {dies.url()});
  ASSERT_TRUE(WaitHealthy(*proxy, 2));
  auto r = Complete(*proxy, R"({"prompt":"abc","max_tokens":5,"stream":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find(R"("text":"b")"), r->body.rfind(R"("text":"b")")) << r->body;  // once
  EXPECT_NE(r->body.find("\"error\""), std::string::npos) << r->body;
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n")) << r->body;
  EXPECT_NE(Metrics(*proxy).find("kvferry:proxy_streams_aborted_total 1"), std::string::npos);
  EXPECT_TRUE(d.fake.submitted().empty());
}

TEST(ProxyClusterTest, PromptsSharingTheirLeadingBytesGoToTheSamePrefill) {
  Instance p0, p1, d;
  auto proxy = StartPollingProxy({p0.url(), p1.url()}, {d.url()});
  ASSERT_TRUE(WaitHealthy(*proxy, 3));
  const std::string shared(160, 's');
  std::set<std::string> homes, spread;
  for (int i = 0; i < 6; ++i) {
    json body = {{"prompt", shared + "tail " + std::to_string(i)}, {"max_tokens", 2}};
    auto r = Complete(*proxy, body.dump());
    ASSERT_TRUE(r && r->status == 200);
    homes.insert(r->get_header_value("X-Kvferry-Prefill"));
  }
  EXPECT_EQ(homes.size(), 1u);
  for (int i = 0; i < 24; ++i) {
    json body = {{"prompt", std::string(160, static_cast<char>('a' + i))}, {"max_tokens", 2}};
    auto r = Complete(*proxy, body.dump());
    ASSERT_TRUE(r && r->status == 200);
    spread.insert(r->get_header_value("X-Kvferry-Prefill"));
  }
  EXPECT_EQ(spread.size(), 2u);  // other prefixes have other homes
  EXPECT_NE(Metrics(*proxy).find("kvferry:proxy_routes_total{leg=\"prefill\",reason=\"affinity\"}"),
            std::string::npos);
}

TEST(ProxyClusterTest, NoDecodeLeftAnswersTheLastErrorNamingIt) {
  Instance p;
  Scripted failing([](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(R"({"error":{"message":"boom","type":"x","param":null,"code":500}})",
                    "application/json");
  });
  auto proxy = StartPollingProxy({p.url()}, {failing.url()});
  auto r = Complete(*proxy, R"({"prompt":"abc"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("boom"), std::string::npos);
}

}  // namespace
}  // namespace kvferry::proxy
