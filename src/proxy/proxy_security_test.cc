// The proxy with API keys and TLS, in front of real OpenAiServers (fake engines) that require
// their own key and serve TLS: clients present the proxy's key, the proxy presents its upstream
// key to P and D, and reaches them over TLS verified against a CA made for this run
// (tests/deploy/make_test_pki.sh). An upstream that refuses the proxy's key is the proxy's
// misconfiguration: 502 naming --upstream-api-key, counted, logged once per upstream.
#include <gtest/gtest.h>
#include <httplib.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kvferry/common/logging.h"
#include "kvferry/proxy/proxy_server.h"
#include "kvferry/server/openai_server.h"
#include "server/testing/fake_instance.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

constexpr const char* kBody = R"({"prompt":"abc","max_tokens":4})";

class ProxySecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvf-pki-XXXXXX").string();
    pki_ = ::mkdtemp(tmpl.data());
    const std::string cmd = std::string("bash ") + KVF_TEST_PKI_SCRIPT + " " + pki_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(pki_); }

  // P or D: requires "upstream-key", optionally over TLS.
  struct Instance : server::testing::FakeInstance {
    explicit Instance(bool tls, http::ApiKeyScope scope = http::ApiKeyScope::kV1)
        : FakeInstance(Options(tls, scope)) {}
    static server::ServerOptions Options(bool tls, http::ApiKeyScope scope) {
      server::ServerOptions o;
      o.api_keys.keys = {"upstream-key"};
      o.api_keys.scope = scope;
      if (tls) o.tls = {pki_ + "/server.pem", pki_ + "/server.key"};
      return o;
    }
  };

  std::unique_ptr<ProxyServer> StartProxy(const server::testing::FakeInstance& p,
                                          const server::testing::FakeInstance& d,
                                          UpstreamAccess upstream, bool tls = false) {
    ProxyOptions o;
    o.port = 0;
    o.prefill_urls = {p.url()};
    o.decode_urls = {d.url()};
    o.connect_timeout_ms = 2000;
    o.prefill_timeout_ms = 10000;
    o.decode_timeout_ms = 10000;
    o.api_keys.keys = {"client-key"};
    o.upstream = std::move(upstream);
    if (tls) o.tls = {pki_ + "/server.pem", pki_ + "/server.key"};
    auto proxy = ProxyServer::Create(o);
    EXPECT_TRUE(proxy.ok()) << proxy.status();
    EXPECT_TRUE((*proxy)->Start().ok());
    return std::move(proxy).value();
  }

  static httplib::Result Post(httplib::Client& c, const std::string& key,
                              const char* body = kBody) {
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    return c.Post("/v1/completions", h, body, "application/json");
  }

  static std::string pki_;
};
std::string ProxySecurityTest::pki_;

TEST_F(ProxySecurityTest, ClientKeysAreCheckedAndTheUpstreamKeyIsTheProxys) {
  Instance p(false), d(false);
  auto proxy = StartProxy(p, d, {"upstream-key", ""});
  httplib::Client c("127.0.0.1", proxy->port());
  // The upstream key is not a client key, a prefix of the right key is not the key.
  for (const std::string& key : {std::string(), std::string("wrong"), std::string("client-ke"),
                                 std::string("upstream-key")}) {
    auto r = Post(c, key);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << key;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], 401);
  }
  EXPECT_TRUE(p.fake.submitted().empty());
  EXPECT_TRUE(d.fake.submitted().empty());
  auto ok = Post(c, "client-key");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "bcab");
  EXPECT_EQ(p.fake.submitted().size(), 1u);
  EXPECT_EQ(d.fake.submitted().size(), 1u);
  httplib::Headers h{{"Authorization", "Bearer client-key"}};
  auto models = c.Get("/v1/models", h);  // forwarded to D with the upstream key
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200) << models->body;
}

// What the proxy logs while it lives: a sink added to the process's logger (before the servers
// start, removed after they stopped, so no thread logs while the sinks change).
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    Logger().sinks().push_back(sink_);
  }
  ~CapturedLog() { std::erase(Logger().sinks(), sink_); }
  int Count(const std::string& what) const {
    const std::string text = out_.str();
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

constexpr const char* kRefusal = "refused the proxy's own API key";

// A refusal of the proxy's own key: 502, the OpenAI body naming the flag and the instance.
void ExpectKeyRefused(const httplib::Result& r, const std::string& instance_url,
                      const std::string& why) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  const json error = json::parse(r->body)["error"];
  EXPECT_EQ(error["code"], 502);
  EXPECT_EQ(error["type"], "bad_gateway_error");
  const std::string message = error["message"];
  EXPECT_NE(message.find("--upstream-api-key"), std::string::npos) << message;
  EXPECT_NE(message.find(instance_url), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message;
}

std::string AuthFailures(httplib::Client& c, const std::string& instance_url) {
  auto m = c.Get("/metrics");
  if (!m) return "no /metrics";
  const std::string host_port = instance_url.substr(instance_url.find("://") + 3);
  const std::string sample =
      "kvferry:proxy_upstream_auth_failures_total{upstream=\"" + host_port + "\"} ";
  const size_t at = m->body.find(sample);
  if (at == std::string::npos) return "none";
  return m->body.substr(at + sample.size(), m->body.find('\n', at) - at - sample.size());
}

TEST_F(ProxySecurityTest, WithoutTheUpstreamKeyPsRefusalIsA502NamingTheFlag) {
  CapturedLog log;
  {
    Instance p(false), d(false);
    auto proxy = StartProxy(p, d, {"", ""});
    httplib::Client c("127.0.0.1", proxy->port());
    // The client's key was right: the refusal is the proxy's, streamed or not.
    ExpectKeyRefused(Post(c, "client-key"), p.url(), "none is set");
    ExpectKeyRefused(Post(c, "client-key", R"({"prompt":"abc","max_tokens":4,"stream":true})"),
                     p.url(), "none is set");
    EXPECT_TRUE(p.fake.submitted().empty());
    EXPECT_TRUE(d.fake.submitted().empty());
    EXPECT_EQ(AuthFailures(c, p.url()), "2");
    EXPECT_EQ(AuthFailures(c, d.url()), "none");
    proxy->Stop();
  }
  EXPECT_EQ(log.Count(kRefusal), 1);  // once per upstream, not per request
}

TEST_F(ProxySecurityTest, AWrongUpstreamKeyIsA502CountedPerUpstream) {
  CapturedLog log;
  {
    Instance p(false), d(false);
    auto proxy = StartProxy(p, d, {"wrong-key", ""});
    httplib::Client c("127.0.0.1", proxy->port());
    for (int i = 0; i < 3; ++i) {
      ExpectKeyRefused(Post(c, "client-key"), p.url(), "does not accept it");
    }
    EXPECT_EQ(AuthFailures(c, p.url()), "3");
    // /v1/models goes to D, which refuses the same key.
    httplib::Headers h{{"Authorization", "Bearer client-key"}};
    ExpectKeyRefused(c.Get("/v1/models", h), d.url(), "does not accept it");
    EXPECT_EQ(AuthFailures(c, d.url()), "1");
    proxy->Stop();
  }
  EXPECT_EQ(log.Count(kRefusal), 2);  // P once, D once
}

TEST_F(ProxySecurityTest, DsRefusalAfterPsAnswerIsA502) {
  server::testing::FakeInstance p;  // takes any request
  Instance d(false);
  auto proxy = StartProxy(p, d, {"", ""});
  httplib::Client c("127.0.0.1", proxy->port());
  ExpectKeyRefused(Post(c, "client-key"), d.url(), "none is set");
  // P's answer holds no first token here, so nothing went out before D refused: a stream gets
  // the same 502 (after P's first token, an error event: proxy_first_token_test.cc).
  ExpectKeyRefused(Post(c, "client-key", R"({"prompt":"abc","max_tokens":4,"stream":true})"),
                   d.url(), "none is set");
  EXPECT_EQ(p.fake.submitted().size(), 2u);
  EXPECT_TRUE(d.fake.submitted().empty());
  EXPECT_EQ(AuthFailures(c, d.url()), "2");
  EXPECT_EQ(AuthFailures(c, p.url()), "none");
}

TEST_F(ProxySecurityTest, TlsEverywhereWithTheCa) {
  Instance p(true), d(true);
  auto proxy = StartProxy(p, d, {"upstream-key", pki_ + "/ca.pem"}, /*tls=*/true);
  httplib::Client c("https://127.0.0.1:" + std::to_string(proxy->port()));
  c.set_ca_cert_path(pki_ + "/ca.pem");
  c.enable_server_certificate_verification(true);
  auto r = Post(c, "client-key");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 200) << r->body;
  auto s = Post(c, "client-key", R"({"prompt":"abc","max_tokens":4,"stream":true})");
  ASSERT_TRUE(s) << httplib::to_string(s.error());
  ASSERT_EQ(s->status, 200) << s->body;
  EXPECT_TRUE(s->body.ends_with("data: [DONE]\n\n")) << s->body;
  EXPECT_EQ(d.fake.submitted().size(), 2u);
}

TEST_F(ProxySecurityTest, MembersAreReadForLoadOverTlsWithTheUpstreamKey) {
  Instance p(true, http::ApiKeyScope::kAll), d(true, http::ApiKeyScope::kAll);
  auto proxy = StartProxy(p, d, {"upstream-key", pki_ + "/ca.pem"});
  httplib::Client c("127.0.0.1", proxy->port());
  httplib::Headers h{{"Authorization", "Bearer client-key"}};
  // /metrics needs the key on these instances: only a read with the key over verified TLS
  // brings figures (a "load" object), and makes the members healthy.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  json table;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.Get("/cluster", h);
    ASSERT_TRUE(r);
    table = json::parse(r->body);
    bool all = table["members"].size() == 2;
    for (const json& m : table["members"]) {
      all = all && m["state"] == "healthy" && m.contains("load");
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const json& m : table["members"]) {
    EXPECT_EQ(m["state"], "healthy") << table;
    EXPECT_TRUE(m.contains("load")) << table;
  }
}

TEST_F(ProxySecurityTest, UpstreamWhoseCertificateDoesNotVerifyIsA503NamingIt) {
  Instance p(true), d(true);
  auto proxy = StartProxy(p, d, {"upstream-key", ""});  // the system's CAs only
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = Post(c, "client-key");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  const std::string message = json::parse(r->body)["error"]["message"];
  EXPECT_NE(message.find(p.url()), std::string::npos) << message;
  EXPECT_NE(message.find("certificate"), std::string::npos) << message;
  EXPECT_TRUE(p.fake.submitted().empty());
}

}  // namespace
}  // namespace kvferry::proxy
