// InstallErrorHandler: a route asked with another method is 405 with Allow (also for a method
// httplib does not parse), an unknown path 404, each an OpenAI error body; a handler's own
// answer is left alone.
#include "kvferry/http/route_errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "http/testing/test_server.h"

namespace kvferry::http {
namespace {

std::unique_ptr<testing::TestServer> Serve() {
  return std::make_unique<testing::TestServer>([](httplib::Server& s) {
    s.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 400;
      res.set_content(R"({"own":true})", "application/json");
    });
    s.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    InstallErrorHandler(s, {{"POST", "/v1/completions"}, {"GET", "/health"}});
  });
}

TEST(RouteErrorsTest, AnotherMethodIs405WithAllow) {
  auto server = Serve();
  httplib::Client client("127.0.0.1", server->port());
  auto put = client.Put("/v1/completions", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(put->get_header_value("Allow"), "POST");
  EXPECT_EQ(put->get_header_value("Connection"), "close");
  auto body = nlohmann::json::parse(put->body);
  EXPECT_EQ(body["error"]["code"], 405);
  auto del = client.Delete("/health");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  EXPECT_EQ(del->get_header_value("Allow"), "GET");
}

TEST(RouteErrorsTest, UnknownPathIs404AndAHandlersOwnAnswerStays) {
  auto server = Serve();
  httplib::Client client("127.0.0.1", server->port());
  auto nowhere = client.Get("/nowhere");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_EQ(nlohmann::json::parse(nowhere->body)["error"]["code"], 404);
  auto own = client.Post("/v1/completions", "{}", "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 400);
  EXPECT_EQ(own->body, R"({"own":true})");
}

}  // namespace
}  // namespace kvferry::http
