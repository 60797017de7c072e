#include "proxy/first_token.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::proxy {
namespace {

using nlohmann::json;

json EventOf(const std::string& chunk) {
  EXPECT_EQ(chunk.rfind("data: ", 0), 0u) << chunk;
  EXPECT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  return json::parse(chunk.substr(6, chunk.size() - 8));
}

const char* kCompletion = R"({"id":"cmpl-1","object":"text_completion","created":5,"model":"tiny",
  "choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-0.5],
  "top_logprobs":[{"a":-0.5}],"text_offset":[0]},"token_ids":[97],"finish_reason":"length"}],
  "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},
  "kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1],"first_token_id":97,
  "first_token_logprob":-0.5,"sampling_seed":3},"kv_load":null})";

TEST(FirstTokenTest, ReadsPsAnswer) {
  auto a = ReadPrefillAnswer(kCompletion);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->has_first_token);
  EXPECT_TRUE(a->holds_blocks);
  EXPECT_EQ(a->finish_reason, "length");
  EXPECT_FALSE(a->ends_request());  // "length": P generates one token only
  EXPECT_EQ(json::parse(a->kv_transfer_params)["first_token_id"], 97);

  json stopped = json::parse(kCompletion);
  stopped["choices"][0]["finish_reason"] = "stop";
  a = ReadPrefillAnswer(stopped.dump());
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->ends_request());

  // vLLM's P: no first token, so a D must compute it whatever P's finish reason.
  json old = json::parse(kCompletion);
  old["kv_transfer_params"].erase("first_token_id");
  old["choices"][0]["finish_reason"] = "stop";
  a = ReadPrefillAnswer(old.dump());
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_first_token);
  EXPECT_FALSE(a->ends_request());

  EXPECT_FALSE(ReadPrefillAnswer("[1]").ok());
  EXPECT_FALSE(ReadPrefillAnswer(R"({"choices":[]})").ok());
}

TEST(FirstTokenTest, WithoutFirstTokenStripsItsFields) {
  auto a = ReadPrefillAnswer(kCompletion);
  ASSERT_TRUE(a.ok());
  const PrefillAnswer old = WithoutFirstToken(*a);
  EXPECT_FALSE(old.has_first_token);
  const json kv = json::parse(old.kv_transfer_params);
  EXPECT_FALSE(kv.contains("first_token_id"));
  EXPECT_FALSE(kv.contains("first_token_logprob"));
  EXPECT_FALSE(kv.contains("sampling_seed"));
  EXPECT_EQ(kv["remote_block_ids"], json::array({1}));
}

TEST(FirstTokenTest, CompletionBecomesAChunk) {
  auto chunk = PrefillAnswerAsChunk(kCompletion, /*final=*/false);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  const json ev = EventOf(*chunk);
  EXPECT_EQ(ev["object"], "text_completion");
  EXPECT_EQ(ev["id"], "cmpl-1");
  EXPECT_EQ(ev["choices"][0]["text"], "a");
  EXPECT_EQ(ev["choices"][0]["token_ids"], json::array({97}));
  EXPECT_EQ(ev["choices"][0]["logprobs"]["token_logprobs"], json::array({-0.5}));
  EXPECT_TRUE(ev["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(ev.contains("usage"));
  EXPECT_FALSE(ev.contains("kv_transfer_params"));
  EXPECT_FALSE(ev.contains("kv_load"));
  // P's answer is the whole answer: its finish reason stays.
  EXPECT_EQ(EventOf(*PrefillAnswerAsChunk(kCompletion, true))["choices"][0]["finish_reason"],
            "length");
}

TEST(FirstTokenTest, ChatMessageBecomesADelta) {
  const char* chat = R"({"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"m",
    "choices":[{"index":0,"message":{"role":"assistant","content":"h"},"logprobs":null,
    "finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},
    "prompt_token_ids":[1,2,3]})";
  auto chunk = PrefillAnswerAsChunk(chat, false);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  const json ev = EventOf(*chunk);
  EXPECT_EQ(ev["object"], "chat.completion.chunk");
  EXPECT_EQ(ev["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "h"}}));
  EXPECT_FALSE(ev["choices"][0].contains("message"));
  EXPECT_EQ(ev["prompt_token_ids"], json::array({1, 2, 3}));  // vLLM's first-chunk field
  const json usage = EventOf(PrefillUsageChunk(chat));
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 1);
}

TEST(FirstTokenTest, ClientFields) {
  EXPECT_EQ(ClientMaxTokens(R"({"max_tokens":1})"), 1);
  EXPECT_EQ(ClientMaxTokens(R"({"max_tokens":9,"max_completion_tokens":1})"), 1);
  EXPECT_EQ(ClientMaxTokens(R"({"prompt":"x"})"), std::nullopt);
  EXPECT_EQ(ClientMaxTokens(R"({"max_tokens":"1"})"), std::nullopt);
  EXPECT_TRUE(WantsUsageChunk(R"({"stream_options":{"include_usage":true}})"));
  EXPECT_FALSE(WantsUsageChunk(R"({"stream":true})"));
}

}  // namespace
}  // namespace kvferry::proxy
