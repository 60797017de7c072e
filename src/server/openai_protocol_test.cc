#include "kvferry/server/openai_protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvferry/http/http_error.h"

namespace kvferry::server {

using ::kvferry::http::HttpStatusFor;
using ::kvferry::http::OpenAiErrorBody;
namespace {

using nlohmann::json;

StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(ApiKind::kCompletion, body);
}

TEST(OpenAiProtocolTest, ParsesACompletionRequest) {
  auto r = Completion(R"({"model":"tiny","prompt":"hello","max_tokens":5,"temperature":0,
      "top_p":0.5,"top_k":-1,"seed":7,"stream":true,"stream_options":{"include_usage":true},
      "logprobs":2,"stop":["\n\n","END"],"ignore_eos":true,"return_token_ids":true,
      "user":"ignored","presence_penalty":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "tiny");
  EXPECT_EQ(r->prompt_text, "hello");
  EXPECT_FALSE(r->prompt_is_tokens);
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_TRUE(r->max_tokens_set);
  EXPECT_EQ(r->params.temperature, 0.0f);
  EXPECT_EQ(r->params.top_p, 0.5f);
  EXPECT_EQ(r->params.top_k, 0);
  EXPECT_EQ(r->params.seed, 7u);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.top_logprobs, 2);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r->params.ignore_eos);
  EXPECT_TRUE(r->return_token_ids);
  EXPECT_FALSE(r->kv_transfer_params.has_value());
}

TEST(OpenAiProtocolTest, PromptForms) {
  auto tokens = Completion(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(tokens.ok());
  EXPECT_TRUE(tokens->prompt_is_tokens);
  EXPECT_EQ(tokens->prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto one = Completion(R"({"prompt":["x"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt_text, "x");
  EXPECT_EQ(one->params.temperature, 1.0f);  // OpenAI default
  EXPECT_FALSE(one->max_tokens_set);
}

TEST(OpenAiProtocolTest, BadRequestsNameTheField) {
  struct Case {
    const char* body;
    const char* needle;
  } cases[] = {
      {"{not json", "not valid JSON"},
      {"[1]", "JSON object"},
      {R"({})", "'prompt' is required"},
      {R"({"prompt":""})", "'prompt' must not be empty"},
      {R"({"prompt":7})", "'prompt' must be"},
      {R"({"prompt":["a","b"]})", "batch"},
      {R"({"prompt":"a","max_tokens":0})", "'max_tokens' must be in [1"},
      {R"({"prompt":"a","max_tokens":"5"})", "'max_tokens' must be an integer"},
      {R"({"prompt":"a","temperature":-1})", "'temperature' is out of range"},
      {R"({"prompt":"a","top_p":0})", "'top_p'"},
      {R"({"prompt":"a","n":2})", "'n' must be 1"},
      {R"({"prompt":"a","logprobs":21})", "'logprobs' must be in [0, 20]"},
      {R"({"prompt":"a","stream":"yes"})", "'stream' must be a boolean"},
      {R"({"prompt":"a","stop":[1]})", "'stop'"},
      {R"({"prompt":"a","model":3})", "'model' must be a string"},
      {R"({"prompt":"a","kv_transfer_params":{"do_remote_prefill":true}})", "kv_transfer_params"},
      {R"({"prompt":"a","kv_transfer_params":[]})", "'kv_transfer_params' must be an object"},
  };
  for (const Case& c : cases) {
    auto r = Completion(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(std::string(r.status().message()).find(c.needle), std::string::npos)
        << c.body << " -> " << r.status();
    EXPECT_EQ(HttpStatusFor(r.status().code()), 400);
  }
}

// Each per-token bound refused just past it, accepted at it.
TEST(OpenAiProtocolTest, StopBoundsAreRefusedJustPastThem) {
  auto with = [](const nlohmann::json& extra) {
    nlohmann::json j = {{"prompt", "a"}};
    j.update(extra);
    return Completion(j.dump());
  };
  auto strings = [](size_t n) {
    std::vector<std::string> v;
    for (size_t i = 0; i < n; ++i) v.push_back("s" + std::to_string(i));
    return v;
  };
  EXPECT_TRUE(with({{"stop", strings(kMaxStopStrings)}}).ok());
  EXPECT_NE(with({{"stop", strings(kMaxStopStrings + 1)}}).status().ToString().find("at most 16"),
            std::string::npos);
  EXPECT_TRUE(with({{"stop", std::string(kMaxStopStringBytes, 'z')}}).ok());
  EXPECT_FALSE(with({{"stop", std::string(kMaxStopStringBytes + 1, 'z')}}).ok());
  EXPECT_FALSE(with({{"stop", {"a", std::string(kMaxStopStringBytes + 1, 'z')}}}).ok());
  EXPECT_TRUE(with({{"stop_token_ids", std::vector<int>(kMaxStopTokenIds, 5)}}).ok());
  auto ids = with({{"stop_token_ids", std::vector<int>(kMaxStopTokenIds + 1, 5)}});
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().ToString().find("'stop_token_ids'"), std::string::npos);
}

TEST(OpenAiProtocolTest, ParsesChatAndKvTransferParams) {
  auto r = ParseOpenAiRequest(ApiKind::kChat, R"({"messages":[
      {"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
      "max_completion_tokens":3,"logprobs":true,"top_logprobs":1,
      "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
                            "remote_engine_id":null,"remote_block_ids":null}})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->chat_messages.size(), 2u);
  EXPECT_EQ(r->chat_messages[1]["content"], "hi there");
  EXPECT_EQ(r->params.max_tokens, 3);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.top_logprobs, 1);
  ASSERT_TRUE(r->kv_transfer_params.has_value());
  EXPECT_TRUE(r->kv_transfer_params->do_remote_decode);
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat, R"({"messages":[]})").ok());
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat, R"({"messages":[{"content":"x"}]})").ok());
  EXPECT_FALSE(
      ParseOpenAiRequest(ApiKind::kChat, R"({"messages":[{"role":"user"}],"top_logprobs":2})")
          .ok());
}

TEST(OpenAiProtocolTest, FormatsCompletionResponseWithLogprobsAndKvParams) {
  ResponseHeader h{ApiKind::kCompletion, "cmpl-1", 100, "tiny", true, true, {}};
  ChoiceOutput c;
  c.text = "ab";
  c.token_ids = {97, 98};
  c.logprobs = {{97, "a", -0.5f, {{"a", -0.5f}, {"q", -2.0f}}}, {98, "b", -0.25f, {}}};
  c.finish_reason = "length";
  connector::KvTransferParams kv;
  kv.do_remote_prefill = true;
  kv.remote_engine_id = "p0";
  kv.remote_request_id = "r";
  kv.remote_block_ids = {kv::LogicalBlockId(1)};
  kv.remote_host = "127.0.0.1";
  kv.remote_port = 5600;
  json j = json::parse(FormatResponse(h, c, Usage{4, 2, 1}, KvHandoff{kv, std::nullopt}));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["token_ids"], json::array({97, 98}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json::array({"a", "b"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"], json::array({-0.5, -0.25}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json::array({0, 1}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0]["q"], -2.0);
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  EXPECT_EQ(j["kv_transfer_params"]["remote_engine_id"], "p0");
  EXPECT_EQ(j["kv_transfer_params"]["remote_block_ids"], json::array({1}));
}

TEST(OpenAiProtocolTest, FormatsChatStreamChunksAndUsage) {
  ResponseHeader h{ApiKind::kChat, "chatcmpl-1", 5, "tiny", false, false, {}};
  ChoiceOutput d;
  d.text = "h";
  const std::string first = FormatStreamChunk(h, d, /*first=*/true);
  ASSERT_TRUE(first.starts_with("data: ") && first.ends_with("\n\n"));
  json j = json::parse(first.substr(6));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "h");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(j.contains("kv_transfer_params"));
  json next = json::parse(FormatStreamChunk(h, d, /*first=*/false).substr(6));
  EXPECT_FALSE(next["choices"][0]["delta"].contains("role"));
  json usage = json::parse(FormatUsageChunk(h, Usage{3, 4, 0}).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
}

TEST(OpenAiProtocolTest, InvalidUtf8IsReplacedNotThrown) {
  ResponseHeader h{ApiKind::kCompletion, "x", 0, "tiny", false, false, {}};
  ChoiceOutput c;
  c.text = std::string("a\xff", 2);
  json j = json::parse(FormatResponse(h, c, Usage{}));
  EXPECT_EQ(j["choices"][0]["text"], "a\xEF\xBF\xBD");
}

TEST(OpenAiProtocolTest, TakeCompleteUtf8HoldsBackAnIncompleteCharacter) {
  std::string p = "ab\xE2\x82";  // "€" is E2 82 AC
  EXPECT_EQ(TakeCompleteUtf8(&p), "ab");
  EXPECT_EQ(p, "\xE2\x82");
  p += "\xAC";
  EXPECT_EQ(TakeCompleteUtf8(&p), "\xE2\x82\xAC");
  EXPECT_EQ(p, "");
  p = "\xC3";
  EXPECT_EQ(TakeCompleteUtf8(&p), "");
  p = "x\xFF";  // invalid byte: passed on for the JSON writer to replace
  EXPECT_EQ(TakeCompleteUtf8(&p), "x\xFF");
}

TEST(HttpErrorTest, MapsStatusCodesAndFormatsOpenAiBodies) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  json j = json::parse(OpenAiErrorBody(InvalidArgumentError("bad"), "max_tokens"));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["code"], 400);
}

}  // namespace
}  // namespace kvferry::server
