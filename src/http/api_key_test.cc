// API keys: the check itself, and a real httplib server that refuses before routing.
#include "kvferry/http/api_key.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>

#include "http/testing/test_server.h"

namespace kvferry::http {
namespace {

TEST(ApiKeysTest, OnlyAConfiguredKeyPasses) {
  auto keys = ApiKeys::Create({"sk-first-key", "sk-second"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Check("Bearer sk-first-key").ok());
  EXPECT_TRUE(keys->Check("Bearer sk-second").ok());
  EXPECT_TRUE(keys->Check("bearer sk-second").ok());  // the scheme is case-insensitive
  for (const char* bad : {"", "sk-first-key", "Bearer", "Bearer ", "Bearer sk-first-ke",
                          "Bearer sk-first-key2", "Bearer sk-first-key ", "Bearer  sk-first-key",
                          "Basic sk-first-key", "Bearer sk-second\n", "Bearer SK-SECOND"}) {
    Status st = keys->Check(bad);
    EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << "'" << bad << "' was accepted";
    EXPECT_EQ(std::string(st.message()).find("sk-"), std::string::npos) << "key echoed: " << st;
  }
}

TEST(ApiKeysTest, NoKeysMeansOpen) {
  auto keys = ApiKeys::Create({});
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
  EXPECT_TRUE(keys->Check("").ok());
}

TEST(ApiKeysTest, UnusableKeysAreRefusedWithoutEchoingThem) {
  for (const std::string& bad :
       {std::string(""), std::string("has space"), std::string("tab\there"), std::string("nl\n")}) {
    auto keys = ApiKeys::Create({"good", bad});
    EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(keys.status().message()).find("#2"), std::string::npos);
    if (!bad.empty()) {
      EXPECT_EQ(std::string(keys.status().message()).find(bad), std::string::npos);
    }
  }
}

TEST(ApiKeysTest, Scopes) {
  EXPECT_TRUE(PathNeedsApiKey("/v1/completions", ApiKeyScope::kV1));
  EXPECT_TRUE(PathNeedsApiKey("/v1/models", ApiKeyScope::kV1));
  EXPECT_TRUE(PathNeedsApiKey("/v1", ApiKeyScope::kV1));
  EXPECT_TRUE(PathNeedsApiKey("/v1/unknown", ApiKeyScope::kV1));
  EXPECT_FALSE(PathNeedsApiKey("/health", ApiKeyScope::kV1));
  EXPECT_FALSE(PathNeedsApiKey("/metrics", ApiKeyScope::kV1));
  EXPECT_FALSE(PathNeedsApiKey("/v10", ApiKeyScope::kV1));
  EXPECT_TRUE(PathNeedsApiKey("/health", ApiKeyScope::kAll));
  EXPECT_TRUE(PathNeedsApiKey("/metrics", ApiKeyScope::kAll));
  EXPECT_EQ(*ParseApiKeyScope("all"), ApiKeyScope::kAll);
  EXPECT_EQ(*ParseApiKeyScope("v1"), ApiKeyScope::kV1);
  EXPECT_FALSE(ParseApiKeyScope("none").ok());
}

// A server whose handlers count their calls, behind RequireApiKeys.
class ApiKeyServerTest : public ::testing::TestWithParam<ApiKeyScope> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::TestServer>([this](httplib::Server& http) {
      http.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
        handled_.fetch_add(1);
        res.set_content("{}", "application/json");
      });
      http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        handled_.fetch_add(1);
        res.set_content("", "text/plain");
      });
      ASSERT_TRUE(RequireApiKeys(http, {{"right-key"}, GetParam()}, [this](const std::string&) {
                    refused_.fetch_add(1);
                  }).ok());
    });
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }

  httplib::Result Post(const std::string& authorization) {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return c.Post("/v1/completions", h, "{}", "application/json");
  }

  std::atomic<int> handled_{0};
  std::atomic<int> refused_{0};
  std::unique_ptr<testing::TestServer> server_;  // after the counters its handlers use
  int port_ = 0;
};

TEST_P(ApiKeyServerTest, MissingWrongAndPrefixKeysAre401WithAnOpenAiBody) {
  for (const std::string& auth : {std::string(), std::string("Bearer wrong"),
                                  std::string("Bearer right-ke"), std::string("right-key")}) {
    auto r = Post(auth);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 401) << auth;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
    auto body = nlohmann::json::parse(r->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r->body;
    EXPECT_EQ(body["error"]["code"], 401);
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(body["error"]["message"].is_string());
  }
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_EQ(refused_.load(), 4);
  auto ok = Post("Bearer right-key");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(handled_.load(), 1);
}

TEST_P(ApiKeyServerTest, HealthIsOpenOnlyInScopeV1) {
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, GetParam() == ApiKeyScope::kV1 ? 200 : 401);
  httplib::Headers h{{"Authorization", "Bearer right-key"}};
  auto with_key = c.Get("/health", h);
  ASSERT_TRUE(with_key);
  EXPECT_EQ(with_key->status, 200);
}

INSTANTIATE_TEST_SUITE_P(Scopes, ApiKeyServerTest,
                         ::testing::Values(ApiKeyScope::kV1, ApiKeyScope::kAll));

}  // namespace
}  // namespace kvferry::http
