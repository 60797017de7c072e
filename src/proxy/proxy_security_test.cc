// The proxy with API keys and TLS, in front of real OpenAiServers (fake engines) that require
// their own key and serve TLS: clients present the proxy's key, the proxy presents its upstream
// key to P and D, and reaches them over TLS verified against a CA made for this run
// (tests/deploy/make_test_pki.sh).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

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

  std::unique_ptr<ProxyServer> StartProxy(const Instance& p, const Instance& d,
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

TEST_F(ProxySecurityTest, WithoutTheUpstreamKeyPsRefusalIsForwarded) {
  Instance p(false), d(false);
  auto proxy = StartProxy(p, d, {"", ""});
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = Post(c, "client-key");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_TRUE(p.fake.submitted().empty());
  EXPECT_TRUE(d.fake.submitted().empty());
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
