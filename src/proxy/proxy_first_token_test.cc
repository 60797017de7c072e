// The proxy's first-token hand-off against fake P and D (httplib servers): P's token is the
// stream's first event, D's events follow; no D: an error event and [DONE]; a token that ends
// the request is P's answer and no D is asked; max_tokens 1 goes to P without kv_transfer_params.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>

#include "http/testing/test_server.h"
#include "kvferry/proxy/proxy_server.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

// An httplib server on a free loopback port, answering POST /v1/completions with `handler`.
struct FakeUpstream : http::testing::TestServer {
  explicit FakeUpstream(httplib::Server::Handler handler)
      : TestServer(
            [&handler](httplib::Server& s) { s.Post("/v1/completions", std::move(handler)); }) {}
};

// P's answer: one token "a", finished by `reason`, with P's first token in its params.
std::string PrefillAnswer(const std::string& reason) {
  return json{{"id", "cmpl-x"},
              {"object", "text_completion"},
              {"created", 1},
              {"model", "tiny"},
              {"choices",
               {{{"index", 0}, {"text", "a"}, {"logprobs", nullptr}, {"finish_reason", reason}}}},
              {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 1}, {"total_tokens", 4}}},
              {"kv_transfer_params",
               {{"do_remote_prefill", true},
                {"remote_engine_id", "p"},
                {"remote_request_id", "r"},
                {"remote_block_ids", json::array()},
                {"remote_host", "h"},
                {"remote_port", 1},
                {"first_token_id", 97},
                {"first_token_logprob", -0.5},
                {"sampling_seed", 7}}}}
      .dump();
}

const char* kDecodeStream =
    "data: {\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"c\",\"finish_reason\":\"length\"}]}\n\n"
    "data: [DONE]\n\n";

std::unique_ptr<ProxyServer> StartFirstTokenProxy(const std::string& p, const std::string& d,
                                                  bool first_token_from_prefill = true) {
  ProxyOptions o;
  o.first_token_from_prefill = first_token_from_prefill;
  o.port = 0;
  o.prefill_urls = {p};
  o.decode_urls = {d};
  o.connect_timeout_ms = 1000;
  o.prefill_timeout_ms = 5000;
  o.decode_timeout_ms = 5000;
  auto proxy = ProxyServer::Create(o);
  EXPECT_TRUE(proxy.ok()) << proxy.status();
  EXPECT_TRUE((*proxy)->Start().ok());
  return std::move(proxy).value();
}

std::vector<json> Events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end;
  }
  return out;
}

TEST(ProxyFirstTokenTest, StreamStartsWithPsTokenThenDs) {
  std::mutex mu;
  json decode_request;
  FakeUpstream p([](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrefillAnswer("length"), "application/json");
  });
  FakeUpstream d([&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    decode_request = json::parse(req.body);
    res.set_content(kDecodeStream, "text/event-stream");
  });
  auto proxy = StartFirstTokenProxy(p.url(), d.url());
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":3,"stream":true})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<json> ev = Events(r->body);
  ASSERT_EQ(ev.size(), 4u) << r->body;
  EXPECT_EQ(ev[0]["choices"][0]["text"], "a");  // P's token, not final
  EXPECT_TRUE(ev[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(ev[0].contains("kv_transfer_params"));
  EXPECT_EQ(ev[1]["choices"][0]["text"], "b");
  EXPECT_EQ(ev[2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev[3], "[DONE]");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(decode_request["kv_transfer_params"]["first_token_id"], 97);
  EXPECT_EQ(decode_request["max_tokens"], 3);  // the client's body
}

// What a streaming client got when P answered with its first token and the only D answered
// `status` with `body`, and the proxy's /metrics after it.
struct AfterPsToken {
  int http_status = 0;
  std::vector<json> events;
  std::string metrics;
  int decode_port = 0;
};
AfterPsToken StreamWhenDAnswers(int status, const std::string& body) {
  FakeUpstream p([](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrefillAnswer("length"), "application/json");
  });
  FakeUpstream d([&](const httplib::Request&, httplib::Response& res) {
    res.status = status;
    res.set_content(body, "application/json");
  });
  auto proxy = StartFirstTokenProxy(p.url(), d.url());
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":3,"stream":true})",
                  "application/json");
  AfterPsToken out;
  out.decode_port = d.port();
  if (!r) return out;
  out.http_status = r->status;
  out.events = Events(r->body);
  if (auto m = c.Get("/metrics")) out.metrics = m->body;
  return out;
}

TEST(ProxyFirstTokenTest, NoDecoderEndsTheStreamWithAnError) {
  const AfterPsToken r = StreamWhenDAnswers(503, R"({"error":{"message":"draining","code":503}})");
  EXPECT_EQ(r.http_status, 200);  // the stream had started with P's token
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0]["choices"][0]["text"], "a");
  EXPECT_TRUE(r.events[1].contains("error")) << r.events[1];
  EXPECT_EQ(r.events[2], "[DONE]");
}

TEST(ProxyFirstTokenTest, DsRefusalOfTheProxysKeyEndsTheStreamNamingTheFlag) {
  for (const int refusal : {401, 403}) {
    const AfterPsToken r = StreamWhenDAnswers(refusal, R"({"error":{"message":"Invalid key"}})");
    EXPECT_EQ(r.http_status, 200);
    ASSERT_EQ(r.events.size(), 3u) << refusal;
    EXPECT_EQ(r.events[0]["choices"][0]["text"], "a");
    EXPECT_EQ(r.events[1]["error"]["code"], 502) << r.events[1];
    const std::string message = r.events[1]["error"]["message"];
    EXPECT_NE(message.find("--upstream-api-key"), std::string::npos) << message;
    EXPECT_NE(message.find("HTTP " + std::to_string(refusal)), std::string::npos) << message;
    EXPECT_EQ(r.events[2], "[DONE]");
    EXPECT_NE(r.metrics.find("kvferry:proxy_upstream_auth_failures_total{upstream=\"127.0.0.1:" +
                             std::to_string(r.decode_port) + "\"} 1\n"),
              std::string::npos)
        << r.metrics;
  }
}

TEST(ProxyFirstTokenTest, TokenThatEndsTheRequestIsPsAnswer) {
  std::atomic<int> decode_calls{0};
  FakeUpstream p([](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrefillAnswer("stop"), "application/json");
  });
  FakeUpstream d([&](const httplib::Request&, httplib::Response& res) {
    ++decode_calls;
    res.set_content(kDecodeStream, "text/event-stream");
  });
  auto proxy = StartFirstTokenProxy(p.url(), d.url());
  httplib::Client c("127.0.0.1", proxy->port());
  auto whole = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":3})", "application/json");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200);
  EXPECT_EQ(json::parse(whole->body)["choices"][0]["finish_reason"], "stop");
  auto streamed = c.Post("/v1/completions",
                         R"({"prompt":"abc","max_tokens":3,"stream":true,
                             "stream_options":{"include_usage":true}})",
                         "application/json");
  ASSERT_TRUE(streamed);
  const std::vector<json> ev = Events(streamed->body);
  ASSERT_EQ(ev.size(), 3u) << streamed->body;
  EXPECT_EQ(ev[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[1]["usage"]["completion_tokens"], 1);
  EXPECT_EQ(ev[2], "[DONE]");
  EXPECT_EQ(decode_calls.load(), 0);
}

TEST(ProxyFirstTokenTest, OneTokenGoesToPWithoutKvTransferParams) {
  std::mutex mu;
  json prefill_request;
  std::atomic<int> decode_calls{0};
  FakeUpstream p([&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    prefill_request = json::parse(req.body);
    res.set_content(R"({"choices":[{"index":0,"text":"a","finish_reason":"length"}]})",
                    "application/json");
  });
  FakeUpstream d([&](const httplib::Request&, httplib::Response& res) {
    ++decode_calls;
    res.set_content("{}", "application/json");
  });
  auto proxy = StartFirstTokenProxy(p.url(), d.url());
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "a");
  EXPECT_EQ(decode_calls.load(), 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(prefill_request.contains("kv_transfer_params"));
  EXPECT_EQ(prefill_request["stream"], false);
}

TEST(ProxyFirstTokenTest, OlderHandoffLeavesTheFirstTokenToD) {
  // --no-first-token-from-prefill: D gets P's params without the token and streams every token.
  std::mutex mu;
  json decode_request;
  FakeUpstream p([](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrefillAnswer("stop"), "application/json");
  });
  FakeUpstream d([&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    decode_request = json::parse(req.body);
    res.set_content(kDecodeStream, "text/event-stream");
  });
  auto proxy = StartFirstTokenProxy(p.url(), d.url(), /*first_token_from_prefill=*/false);
  httplib::Client c("127.0.0.1", proxy->port());
  auto r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":1,"stream":true})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, kDecodeStream);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(decode_request["kv_transfer_params"].contains("first_token_id"));
  EXPECT_EQ(decode_request["kv_transfer_params"]["remote_engine_id"], "p");
}

}  // namespace
}  // namespace kvferry::proxy
