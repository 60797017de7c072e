// OpenAiServer over a FakeGenerationService, through real HTTP on loopback.
#include "kvferry/server/openai_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/testing/fake_generation_service.h"

namespace kvferry::server {
namespace {

using nlohmann::json;

class OpenAiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartWith(1); }
  void StartWith(int interval_ms) {
    server_.reset();
    fake_ = std::make_unique<testing::FakeGenerationService>(interval_ms);
    ServerOptions opts;
    opts.port = 0;
    opts.request_timeout_ms = 20000;
    server_ = std::make_unique<OpenAiServer>(opts, fake_.get(), &metrics_);
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(std::chrono::seconds(20));
  }
  void TearDown() override {
    server_->Stop();
    server_.reset();
    fake_.reset();
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }

  ServerMetrics metrics_;
  std::unique_ptr<testing::FakeGenerationService> fake_;
  std::unique_ptr<OpenAiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(OpenAiServerTest, HealthModelsAndMetrics) {
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  json j = json::parse(m->body);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["max_model_len"], 256);
  auto nf = client_->Get("/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json::parse(nf->body)["error"]["code"], 404);
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* name :
       {"kvferry:kv_blocks{state=\"held_for_transfer\"}", "kvferry:kv_transfer_bytes_total",
        "kvferry:kv_transfer_failures_total{kind=\"handshake\"}",
        "# TYPE kvferry:time_to_first_token_seconds histogram"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  }
}

TEST_F(OpenAiServerTest, CompletionAnswersWithUsageLogprobsAndTokenIds) {
  auto r = Post("/v1/completions",
                R"({"model":"tiny","prompt":"abc","max_tokens":4,"logprobs":1,
                    "return_token_ids":true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  // Prompt tokens: <bos> a b c; the fake cycles the byte tokens from index 1: b c a b.
  EXPECT_EQ(j["choices"][0]["text"], "bcab");
  EXPECT_EQ(j["choices"][0]["token_ids"], json::array({98, 99, 97, 98}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][1], -0.25);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_TRUE(j["kv_transfer_params"].is_null());
  ASSERT_EQ(fake_->submitted().size(), 1u);
  EXPECT_EQ(fake_->submitted()[0].params.top_logprobs, 1);
}

TEST_F(OpenAiServerTest, TokenizeGivesThePromptIdsGenerationWouldUse) {
  auto r = Post("/tokenize", R"({"model":"tiny","prompt":"abc","max_tokens":4})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["tokens"], json::array({256, 97, 98, 99}));  // <bos> a b c, as generation
  EXPECT_EQ(j["count"], 4);
  EXPECT_EQ(j["max_model_len"], 256);
  // A chat is rendered with the chat template first; the answer's usage counts the same ids.
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  auto t = Post("/tokenize", chat);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  auto c = Post("/v1/chat/completions", chat);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(t->body)["count"], json::parse(c->body)["usage"]["prompt_tokens"]);
  // Token-id prompts come back as they are; bad bodies are OpenAI errors.
  auto ids = Post("/tokenize", R"({"prompt":[5,6,7]})");
  ASSERT_TRUE(ids);
  EXPECT_EQ(json::parse(ids->body)["tokens"], json::array({5, 6, 7}));
  for (const char* bad : {"not json", R"({"prompt":""})", R"({"model":"other","prompt":"a"})"}) {
    auto e = Post("/tokenize", bad);
    ASSERT_TRUE(e);
    EXPECT_GE(e->status, 400) << bad;
    EXPECT_LT(e->status, 500) << bad;
    EXPECT_TRUE(json::parse(e->body)["error"].contains("message")) << e->body;
  }
}

TEST_F(OpenAiServerTest, KvTransferParamsGoInAndComeBack) {
  auto r = Post("/v1/completions", R"({"prompt":"abc","max_tokens":1,
      "kv_transfer_params":{"do_remote_decode":true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["kv_transfer_params"]["do_remote_prefill"], true);
  EXPECT_EQ(j["kv_transfer_params"]["remote_engine_id"], "fake-p");
  EXPECT_EQ(j["kv_transfer_params"]["remote_block_ids"], json::array({3, 4}));
  ASSERT_EQ(fake_->submitted().size(), 1u);
  ASSERT_TRUE(fake_->submitted()[0].kv_transfer_params.has_value());
  EXPECT_TRUE(fake_->submitted()[0].kv_transfer_params->do_remote_decode);
}

TEST_F(OpenAiServerTest, ChatStreamsServerSentEvents) {
  auto r = Post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,
                    "stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<json> events;
  size_t pos = 0;
  bool done = false;
  while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", pos);
    const std::string data = r->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    events.push_back(json::parse(data));
  }
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& e : events) {
    if (!e["choices"].empty()) text += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text.size(), 3u);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 3);
}

TEST_F(OpenAiServerTest, ErrorsAreOpenAiBodiesWithTheRightCodes) {
  struct Case {
    const char* path;
    const char* body;
    int code;
  } cases[] = {
      {"/v1/completions", "{bad", 400},
      {"/v1/completions", R"({"prompt":"a","max_tokens":-1})", 400},
      {"/v1/completions", R"({"prompt":"a","model":"other"})", 404},
      {"/v1/completions", R"({"prompt":[1,999]})", 400},
      {"/v1/completions", R"({"prompt":"a","max_tokens":300})", 400},  // over the context
      {"/v1/completions", R"({"prompt":"FAIL"})", 400},                // engine refusal
      {"/v1/chat/completions", R"({"messages":"x"})", 400},
  };
  for (const Case& c : cases) {
    auto r = Post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.code) << c.body << " -> " << r->body;
    json j = json::parse(r->body);
    EXPECT_EQ(j["error"]["code"], c.code) << c.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
  const std::string long_prompt(300, 'a');
  auto r = Post("/v1/completions", json{{"prompt", long_prompt}}.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("maximum context length is 256"), std::string::npos);
}

TEST_F(OpenAiServerTest, StopStringEndsTheAnswerAndAbortsTheEngineRequest) {
  auto r = Post("/v1/completions", R"({"prompt":"xyzw","max_tokens":50,"stop":"w"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "yz");  // the fake answers y z w x ...; "w" stops
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(fake_->aborted().size(), 1u);
}

TEST_F(OpenAiServerTest, ClientDisconnectDuringStreamAbortsTheRequest) {
  StartWith(/*interval_ms=*/20);
  httplib::Client c("127.0.0.1", server_->port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":"abc","max_tokens":200,"stream":true})";
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);  // returns false: we cancelled
  EXPECT_GE(chunks, 3);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fake_->aborted().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fake_->aborted().size(), 1u);
}

TEST_F(OpenAiServerTest, DrainingRefusesNewRequests) {
  server_->BeginDrain();
  auto r = Post("/v1/completions", R"({"prompt":"a"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
}

// --api-key: a request without one of the keys is 401 with an OpenAI body and never reaches the
// generation service; /health stays open (scope v1); refusals are counted by endpoint.
class OpenAiServerApiKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<testing::FakeGenerationService>(1);
    ServerOptions opts;
    opts.port = 0;
    opts.request_timeout_ms = 20000;
    opts.api_keys.keys = {"key-one", "key-two"};
    server_ = std::make_unique<OpenAiServer>(opts, fake_.get(), &metrics_);
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(std::chrono::seconds(20));
  }
  void TearDown() override {
    server_->Stop();
    server_.reset();
  }
  httplib::Result Post(const std::string& authorization, bool stream = false) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return client_->Post(
        "/v1/completions", h,
        std::string(R"({"prompt":"abc","max_tokens":3,"stream":)") + (stream ? "true}" : "false}"),
        "application/json");
  }

  ServerMetrics metrics_;
  std::unique_ptr<testing::FakeGenerationService> fake_;
  std::unique_ptr<OpenAiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(OpenAiServerApiKeyTest, WrongKeysAre401AndGenerateNothing) {
  for (const char* auth : {"", "Bearer key-on", "Bearer key-one!", "Bearer nope", "key-one"}) {
    auto r = Post(auth);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << auth;
    json j = json::parse(r->body);
    EXPECT_EQ(j["error"]["code"], 401);
    EXPECT_TRUE(j["error"]["message"].is_string());
  }
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  EXPECT_TRUE(fake_->submitted().empty());
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find(R"(kvferry:http_requests_total{endpoint="/v1/completions",code="401"} 5)"),
            std::string::npos)
      << text;

  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ok = Post("Bearer key-two");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto streamed = Post("Bearer key-one", /*stream=*/true);
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_NE(streamed->body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(fake_->submitted().size(), 2u);
}

TEST(OpenAiServerOptionsTest, UnusableKeyOrTlsFilesFailStart) {
  testing::FakeGenerationService fake(1);
  ServerMetrics metrics;
  ServerOptions opts;
  opts.port = 0;
  opts.api_keys.keys = {"with space"};
  EXPECT_EQ(OpenAiServer(opts, &fake, &metrics).Start().code(), StatusCode::kInvalidArgument);
  opts.api_keys.keys.clear();
  opts.tls.cert_file = "/nonexistent/cert.pem";
  EXPECT_EQ(OpenAiServer(opts, &fake, &metrics).Start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::server
