// ProxyServer in front of real OpenAiServers (with fake engines) and of misbehaving upstreams.
#include "kvferry/proxy/proxy_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/testing/test_server.h"
#include "kvferry/server/openai_server.h"
#include "server/testing/fake_instance.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

using Instance = server::testing::FakeInstance;

std::unique_ptr<ProxyServer> StartProxy(std::vector<std::string> p, std::vector<std::string> d,
                                        int64_t timeout_ms = 5000) {
  ProxyOptions o;
  o.port = 0;
  o.prefill_urls = std::move(p);
  o.decode_urls = std::move(d);
  o.connect_timeout_ms = 1000;
  o.prefill_timeout_ms = timeout_ms;
  o.decode_timeout_ms = timeout_ms;
  auto proxy = ProxyServer::Create(o);
  EXPECT_TRUE(proxy.ok()) << proxy.status();
  EXPECT_TRUE((*proxy)->Start().ok());
  return std::move(proxy).value();
}

// A free port nobody listens on (bound, not listened on, then released).
int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Waits (up to 5 s) until `proxy` has `n` requests in flight.
bool AwaitInFlight(const ProxyServer& proxy, int64_t n) {
  const Deadline deadline = Deadline::AfterMs(5000);
  while (proxy.in_flight() != n && !deadline.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return proxy.in_flight() == n;
}

// A streamed completion through `port`, on its own thread; its body once joined.
struct StreamingClient {
  StreamingClient(int port, int max_tokens)
      : thread([this, port, max_tokens] {
          httplib::Client c("127.0.0.1", port);
          c.set_read_timeout(std::chrono::seconds(30));
          auto r = c.Post(
              "/v1/completions",
              json{{"prompt", "abcdef"}, {"max_tokens", max_tokens}, {"stream", true}}.dump(),
              "application/json");
          if (r) body = r->body;
        }) {}
  std::string Join() {
    thread.join();
    return body;
  }
  std::string body;
  std::thread thread;
};

// SIGTERM's drain: a stream admitted before it runs to its end while new requests and /health
// answer 503; past the drain timeout a stream still running ends with an error event and
// [DONE], not cut off mid-body.
TEST(ProxyServerTest, ShutdownDrainsRunningStreamsAndEndsTheRestWithAnError) {
  Instance p;
  Instance d({}, /*token_interval_ms=*/20);
  auto proxy = StartProxy({p.url()}, {d.url()});
  StreamingClient running(proxy->port(), 30);  // ~0.6 s of tokens
  ASSERT_TRUE(AwaitInFlight(*proxy, 1));
  proxy->BeginDrain();
  httplib::Client c("127.0.0.1", proxy->port());
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  auto refused =
      c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":5})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("shutting down"), std::string::npos) << refused->body;
  EXPECT_TRUE(proxy->WaitIdle(Deadline::AfterMs(20000)));
  const std::string whole = running.Join();
  EXPECT_EQ(whole.find("error"), std::string::npos) << whole;
  EXPECT_TRUE(whole.ends_with("data: [DONE]\n\n")) << whole;

  auto cut_proxy = StartProxy({p.url()}, {d.url()});
  StreamingClient left(cut_proxy->port(), 200);  // ~4 s of tokens
  ASSERT_TRUE(AwaitInFlight(*cut_proxy, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // some tokens went out
  cut_proxy->Shutdown(/*drain_timeout_ms=*/100);
  const std::string ended = left.Join();
  EXPECT_NE(ended.find("shutting down"), std::string::npos) << ended;
  EXPECT_TRUE(ended.ends_with("data: [DONE]\n\n")) << ended;
  EXPECT_EQ(cut_proxy->in_flight(), 0);
}

TEST(ProxyServerTest, HandsOffFromPrefillToDecodeRoundRobin) {
  Instance p1, p2, d1;
  auto proxy = StartProxy({p1.url(), p2.url()}, {d1.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  for (int i = 0; i < 4; ++i) {
    httplib::Headers h = {{"X-Request-Id", "req-" + std::to_string(i)}};
    auto r = c.Post("/v1/completions", h, R"({"prompt":"abc","max_tokens":5})", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "bcabc");
  }
  ASSERT_EQ(p1.fake.submitted().size(), 2u);
  ASSERT_EQ(p2.fake.submitted().size(), 2u);
  // Idle members take turns; which P took req-0 is the routing's choice.
  Instance& first = p1.fake.submitted()[0].request_id.starts_with("req-0#") ? p1 : p2;
  const server::GenerateRequest p_leg = first.fake.submitted()[0];
  EXPECT_EQ(p_leg.params.max_tokens, 1);
  ASSERT_TRUE(p_leg.kv_transfer_params.has_value());
  EXPECT_TRUE(p_leg.kv_transfer_params->do_remote_decode);
  ASSERT_EQ(d1.fake.submitted().size(), 4u);
  const server::GenerateRequest d_leg = d1.fake.submitted()[0];
  EXPECT_EQ(d_leg.params.max_tokens, 5);
  ASSERT_TRUE(d_leg.kv_transfer_params.has_value());
  EXPECT_TRUE(d_leg.kv_transfer_params->do_remote_prefill);
  EXPECT_EQ(d_leg.kv_transfer_params->remote_engine_id, "fake-p");
  // The same X-Request-Id on both legs: P's engine id names it, and P returned it to D.
  EXPECT_EQ(p_leg.request_id.rfind("req-0#", 0), 0u) << p_leg.request_id;
  EXPECT_EQ(d_leg.kv_transfer_params->remote_request_id, p_leg.request_id);
}

TEST(ProxyServerTest, StreamsDecodeOutputThrough) {
  Instance p, d;
  auto proxy = StartProxy({p.url()}, {d.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true})",
                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  EXPECT_NE(r->body.find("chat.completion.chunk"), std::string::npos);
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n")) << r->body;
  EXPECT_FALSE(p.fake.submitted()[0].kv_transfer_params->do_remote_prefill);
}

TEST(ProxyServerTest, UpstreamErrorsAreForwardedWithTheirStatus) {
  Instance p, d;
  auto proxy = StartProxy({p.url()}, {d.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  auto bad = c.Post("/v1/completions", R"({"prompt":"FAIL"})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], 400);
  auto not_json = c.Post("/v1/completions", "{", "application/json");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
}

// A member that answers 408 (the proxy's request to it did not arrive whole in time: a link cut
// under it, as the chaos soak found) never ran the request: another member is tried, and the
// client gets its answer, not the 408 as if the client had been slow.
TEST(ProxyServerTest, AMemberAnswering408IsRetriedOnAnother) {
  Instance p, d;
  std::atomic<int> hits{0};
  http::testing::TestServer timed_out([&hits](httplib::Server& s) {
    s.Post("/v1/completions", [&hits](const httplib::Request&, httplib::Response& res) {
      ++hits;
      res.status = 408;
      res.set_content(R"({"error":{"code":408,"message":"did not arrive"}})", "application/json");
    });
  });
  auto proxy = StartProxy({timed_out.url(), p.url()}, {d.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  for (int i = 0; i < 4; ++i) {
    auto r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":5})", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "bcabc");
  }
  EXPECT_GE(hits.load(), 1);  // the 408 member was picked, and the request went on to p
  EXPECT_EQ(p.fake.submitted().size(), 4u);
}

TEST(ProxyServerTest, UnreachablePrefillIsA503NamingIt) {
  Instance d;
  const std::string dead = "http://127.0.0.1:" + std::to_string(DeadPort());
  auto proxy = StartProxy({dead}, {d.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/completions", R"({"prompt":"abc"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find(dead),
            std::string::npos)
      << r->body;
}

TEST(ProxyServerTest, SilentDecodeTimesOutWith504) {
  Instance p;
  http::testing::TestServer silent([](httplib::Server& s) {
    s.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      res.set_content("{}", "application/json");
    });
  });
  auto proxy = StartProxy({p.url()}, {silent.url()}, /*timeout_ms=*/300);
  httplib::Client c("127.0.0.1", proxy->port());
  c.set_read_timeout(std::chrono::seconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/completions", R"({"prompt":"abc"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(3000));  // the status proves the timeout
  EXPECT_EQ(r->status, 504) << r->body;
  proxy->Stop();
}

TEST(ProxyServerTest, PrefillWithoutKvParamsIsAClearError) {
  // Answers like a colocated server: no kv_transfer_params.
  http::testing::TestServer plain([](httplib::Server& s) {
    s.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"choices":[{"text":"x"}],"kv_transfer_params":null})",
                      "application/json");
    });
  });
  Instance d;
  auto proxy = StartProxy({plain.url()}, {d.url()});
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/completions", R"({"prompt":"abc"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("--kv-transfer-config"), std::string::npos);
  proxy->Stop();
}

TEST(ProxyServerTest, CreateRejectsBadConfigs) {
  EXPECT_EQ(ProxyServer::Create({}).status().code(), StatusCode::kInvalidArgument);
  ProxyOptions o;
  o.prefill_urls = {"http://x:1"};
  o.decode_urls = {"nonsense"};
  EXPECT_EQ(ProxyServer::Create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::proxy
