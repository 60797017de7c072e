// End to end: the first output token comes from P (docs/serving.md, "kvferry proxy"). Real
// `kvferry serve` P and D (different KV geometry) behind `kvferry proxy`, against a colocated
// instance: completions and chat, streamed and not, greedy and seeded sampling, with logprobs —
// every answer equals the colocated one (text, token ids, logprobs, finish reason, usage) and D
// pulled every prompt token (outcome "pulled", pulled_tokens == prompt_tokens, no fallback).
// A first token that ends the request (a stop token, max_tokens 1, a stop string) is P's answer:
// D computes nothing, and nothing stays held on P.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "e2e_process.h"

namespace kvferry::e2e {
namespace {

using nlohmann::json;

std::vector<std::string> ServeArgs(const std::string& engine_id, int block_size,
                                   const char* layout) {
  json kv = {{"kv_connector", "FerryConnector"},
             {"kv_role", "kv_both"},
             {"engine_id", engine_id},
             {"kv_connector_extra_config",
              {{"side_channel_host", "127.0.0.1"}, {"side_channel_port", 0}}}};
  return {"serve",
          "--port",
          "0",
          "--threads",
          "1",
          "--block-size",
          std::to_string(block_size),
          "--kv-cache-layout",
          layout,
          "--kv-transfer-config",
          kv.dump()};
}

std::string Text(int len, int salt) {
  std::string s;
  for (int i = 0; i < len; ++i) s += static_cast<char>(33 + (i * 7 + salt * 13) % 90);
  return s;
}

// What must be equal to colocated.
json Essence(const json& a) {
  const json& c = a["choices"][0];
  json e = {{"finish_reason", c["finish_reason"]}, {"logprobs", c["logprobs"]}};
  if (c.contains("message")) e["content"] = c["message"]["content"];
  if (c.contains("text")) e["text"] = c["text"];
  if (c.contains("token_ids")) e["token_ids"] = c["token_ids"];
  if (a.contains("usage")) {
    e["prompt_tokens"] = a["usage"]["prompt_tokens"];
    e["completion_tokens"] = a["usage"]["completion_tokens"];
  }
  return e;
}

// A streamed answer folded by Post keeps only token logprobs (no alternatives).
json StreamEssence(const json& a) {
  json e = Essence(a);
  json lps = json::array();
  const json& lp = a["choices"][0]["logprobs"];
  if (lp.contains("token_logprobs")) lps = lp["token_logprobs"];
  if (lp.contains("content")) {
    for (const json& t : lp["content"]) lps.push_back(t["logprob"]);
  }
  e["logprobs"] = lps;
  e["content"] = nullptr;
  e["text"] = a["choices"][0].value("text", std::string());
  if (a["choices"][0].contains("message")) {
    e["text"] = a["choices"][0]["message"]["content"];
  }
  return e;
}

class PdFirstTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("kvferry-e2e-first-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    colocated_ = std::make_unique<KvferryProcess>(
        "colocated", std::vector<std::string>{"serve", "--port", "0", "--threads", "1"}, dir_);
    p_ = std::make_unique<KvferryProcess>("p", ServeArgs("p0", 128, "NHD"), dir_);
    d_ = std::make_unique<KvferryProcess>("d", ServeArgs("d0", 32, "HND"), dir_);
    ASSERT_TRUE(colocated_->ok() && p_->ok() && d_->ok())
        << colocated_->error() << p_->error() << d_->error();
    proxy_ = std::make_unique<KvferryProcess>(
        "proxy",
        std::vector<std::string>{"proxy", "--port", "0", "--prefill", p_->url(), "--decode",
                                 d_->url()},
        dir_);
    ASSERT_TRUE(proxy_->ok()) << proxy_->error();
  }
  void TearDown() override {
    if (proxy_) EXPECT_TRUE(proxy_->Stop());
    if (d_) EXPECT_TRUE(d_->Stop());
    if (p_) EXPECT_TRUE(p_->Stop());
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // The colocated answer and the answer through the proxy, both non-streamed or both streamed
  // (a streamed colocated answer is folded the same way).
  std::pair<json, json> Both(const std::string& path, const json& body) {
    auto co = Post(colocated_->port(), path, body);
    auto pd = Post(proxy_->port(), path, body);
    EXPECT_TRUE(co.has_value() && pd.has_value());
    if (!co || !pd) return {};
    EXPECT_EQ((*co)["_status"], 200) << co->dump();
    EXPECT_EQ((*pd)["_status"], 200) << pd->dump();
    return {*co, *pd};
  }

  void ExpectPulledEveryPromptToken(const json& answer, const std::string& what) {
    ASSERT_TRUE(answer.contains("kv_load")) << what << ": " << answer.dump();
    const json& kl = answer["kv_load"];
    EXPECT_EQ(kl["outcome"], "pulled") << what << ": " << kl.dump();
    EXPECT_EQ(kl["local_hit_tokens"], 0) << what;
    EXPECT_EQ(kl["pulled_tokens"], answer["usage"]["prompt_tokens"]) << what << ": " << kl.dump();
    EXPECT_GT(kl["pulled_bytes"].get<int64_t>(), 0) << what;
  }

  double Fallbacks() {
    double sum = 0;
    for (const char* kind : {"handshake", "transfer", "deadline", "generation"}) {
      sum += Metric(d_->port(),
                    std::string("kvferry:kv_transfer_failures_total{kind=\"") + kind + "\"}");
    }
    return sum;
  }

  // Nothing used or held on P or D (metrics refresh every 50 ms), no lease expired.
  void ExpectNothingHeld() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    double held = -1, p_used = -1, d_used = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      held = Metric(p_->port(), "kvferry:kv_blocks{state=\"held_for_transfer\"}");
      p_used = Metric(p_->port(), "kvferry:kv_blocks{state=\"used\"}");
      d_used = Metric(d_->port(), "kvferry:kv_blocks{state=\"used\"}");
      if (held == 0 && p_used == 0 && d_used == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(held, 0);
    EXPECT_EQ(p_used, 0);
    EXPECT_EQ(d_used, 0);
    EXPECT_EQ(Metric(p_->port(), "kvferry:kv_leases_total{event=\"expired\"}"), 0);
  }

  std::filesystem::path dir_;
  std::unique_ptr<KvferryProcess> colocated_, p_, d_, proxy_;
};

TEST_F(PdFirstTokenTest, CompletionsAndChatStreamedAndNotEqualColocated) {
  int salt = 0;
  for (const bool seeded : {false, true}) {
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(std::string(seeded ? "seeded" : "greedy") + (stream ? ", streamed" : ""));
      json completion = {
          {"prompt", Text(300, ++salt)},      {"max_tokens", 12},   {"logprobs", 3},
          {"return_token_ids", true},         {"ignore_eos", true}, {"stream", stream},
          {"temperature", seeded ? 0.9 : 0.0}};
      json chat = {{"messages", {{{"role", "user"}, {"content", Text(200, ++salt)}}}},
                   {"max_tokens", 10},
                   {"logprobs", true},
                   {"top_logprobs", 2},
                   {"ignore_eos", true},
                   {"stream", stream},
                   {"temperature", seeded ? 0.9 : 0.0}};
      if (seeded) completion["seed"] = chat["seed"] = 4242;
      if (stream) completion["stream_options"] = chat["stream_options"] = {{"include_usage", true}};
      for (const auto& [path, body] :
           {std::pair<std::string, json>{"/v1/completions", completion},
            std::pair<std::string, json>{"/v1/chat/completions", chat}}) {
        auto [co, pd] = Both(path, body);
        if (co.is_null()) continue;
        if (stream) {
          EXPECT_EQ(StreamEssence(pd), StreamEssence(co)) << path;
        } else {
          EXPECT_EQ(Essence(pd), Essence(co)) << path;
        }
        ExpectPulledEveryPromptToken(pd, path);
      }
    }
  }
  EXPECT_EQ(Metric(d_->port(), "kvferry:kv_transfers_total"), 8);
  EXPECT_EQ(Fallbacks(), 0);
  ExpectNothingHeld();
}

TEST_F(PdFirstTokenTest, StreamedFirstTokenIsPsAndNotRepeated) {
  // The stream's first event carries the first token (P's: role and content), and the folded
  // text has each token once (equal to colocated).
  const json body = {{"messages", {{{"role", "user"}, {"content", Text(150, 7)}}}},
                     {"max_tokens", 6},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"return_token_ids", true},
                     {"stream", true}};
  auto [co, pd] = Both("/v1/chat/completions", body);
  ASSERT_FALSE(co.is_null());
  EXPECT_EQ(pd["choices"][0]["token_ids"], co["choices"][0]["token_ids"]);
  EXPECT_EQ(pd["choices"][0]["token_ids"].size(), 6u);
  EXPECT_EQ(pd["choices"][0]["text"], co["choices"][0]["text"]);
  EXPECT_EQ(pd["kv_load"]["outcome"], "pulled");
  // The headers name both legs, though the stream started before D answered.
  httplib::Client c("127.0.0.1", proxy_->port());
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Kvferry-Prefill"), p_->url());
  EXPECT_EQ(r->get_header_value("X-Kvferry-Decode"), d_->url());
}

TEST_F(PdFirstTokenTest, FirstTokenThatEndsTheRequestIsPsAnswer) {
  const json base = {{"prompt", Text(260, 9)}, {"max_tokens", 8}, {"temperature", 0},
                     {"ignore_eos", true},     {"logprobs", 1},   {"return_token_ids", true}};
  auto ref = Post(colocated_->port(), "/v1/completions", base);
  ASSERT_TRUE(ref.has_value());
  const int first = (*ref)["choices"][0]["token_ids"][0].get<int>();
  const std::string first_text = (*ref)["choices"][0]["logprobs"]["tokens"][0];
  const double d_requests_before = Metric(d_->port(), "kvferry:prompt_tokens_total");

  json stop_token = base;
  stop_token["stop_token_ids"] = {first};
  json one_token = base;
  one_token["max_tokens"] = 1;
  for (const json& body : {stop_token, one_token}) {
    for (const bool stream : {false, true}) {
      json b = body;
      b["stream"] = stream;
      auto [co, pd] = Both("/v1/completions", b);
      if (co.is_null()) continue;
      EXPECT_EQ(stream ? StreamEssence(pd) : Essence(pd), stream ? StreamEssence(co) : Essence(co))
          << b.dump();
      EXPECT_FALSE(pd.contains("kv_load")) << "D answered: " << pd.dump();
    }
  }
  // D was never asked: it saw no prompt tokens.
  EXPECT_EQ(Metric(d_->port(), "kvferry:prompt_tokens_total"), d_requests_before);
  EXPECT_EQ(Metric(p_->port(), "kvferry:kv_leases_total{event=\"granted\"}"), 0);

  // A stop string in the first token: P's answer again; the lease P granted (its engine does
  // not see stop strings) is given back through D without a pull.
  ASSERT_FALSE(first_text.empty());  // this prompt's first token is a printable byte
  json stop_string = base;
  stop_string["stop"] = {first_text};
  auto [co, pd] = Both("/v1/completions", stop_string);
  ASSERT_FALSE(co.is_null());
  EXPECT_EQ(Essence(pd), Essence(co));
  EXPECT_EQ(co["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(Metric(p_->port(), "kvferry:kv_leases_total{event=\"granted\"}"), 1);
  EXPECT_EQ(Metric(d_->port(), "kvferry:kv_transfers_total"), 0);
  // Released by D (side-channel release), not by expiry: nothing is held a moment later.
  ExpectNothingHeld();
  EXPECT_EQ(Metric(p_->port(), "kvferry:kv_leases_total{event=\"released_by_notification\"}"), 1);
}

}  // namespace
}  // namespace kvferry::e2e
