#include "kvferry/proxy/handoff.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvferry/proxy/upstream.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

// stream_options is dropped from the bodies sent without streaming, so its type is checked
// first: a malformed one is refused as the instance would refuse it, not silently dropped.
TEST(HandoffTest, MalformedStreamOptionsAreRefusedNotDropped) {
  for (const char* body : {R"({"prompt":"hi","stream_options":""})",
                           R"({"prompt":"hi","stream_options":{"include_usage":"yes"}})"}) {
    EXPECT_EQ(BuildPrefillBody(body).status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(BuildWholeOnPrefillBody(body).status().code(), StatusCode::kInvalidArgument) << body;
  }
  EXPECT_TRUE(BuildPrefillBody(R"({"prompt":"hi","stream_options":null})").ok());
}

TEST(HandoffTest, PrefillBodyIsVllmsProxyRequest) {
  auto b = BuildPrefillBody(
      R"({"prompt":"hi","max_tokens":50,"max_completion_tokens":50,"stream":true,
          "stream_options":{"include_usage":true},"min_tokens":3,"temperature":0})");
  ASSERT_TRUE(b.ok()) << b.status();
  json j = json::parse(*b);
  EXPECT_EQ(j["prompt"], "hi");
  EXPECT_EQ(j["max_tokens"], 1);
  EXPECT_EQ(j["max_completion_tokens"], 1);
  EXPECT_EQ(j["stream"], false);
  EXPECT_FALSE(j.contains("stream_options"));
  EXPECT_FALSE(j.contains("min_tokens"));
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_EQ(j["kv_transfer_params"],
            json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,
                "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,
                "remote_port":null})"));
  EXPECT_FALSE(
      json::parse(*BuildPrefillBody(R"({"prompt":"x"})")).contains("max_completion_tokens"));
  EXPECT_EQ(BuildPrefillBody("nope").status().code(), StatusCode::kInvalidArgument);
}

TEST(HandoffTest, DecodeBodyCarriesPrefillParamsVerbatim) {
  const std::string p_response =
      R"({"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,
          "remote_engine_id":"p0","remote_block_ids":[1,2],"future_field":7}})";
  auto kv = ExtractKvTransferParams(p_response);
  ASSERT_TRUE(kv.ok());
  auto d = BuildDecodeBody(R"({"prompt":"hi","stream":true,"max_tokens":9})", *kv);
  ASSERT_TRUE(d.ok());
  json j = json::parse(*d);
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["kv_transfer_params"]["remote_block_ids"], json::array({1, 2}));
  EXPECT_EQ(j["kv_transfer_params"]["future_field"], 7);
  EXPECT_EQ(ExtractKvTransferParams(R"({"choices":[]})").status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ExtractKvTransferParams(R"({"kv_transfer_params":null})").status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(WantsStream(R"({"stream":true})"));
  EXPECT_FALSE(WantsStream(R"({"stream":"true"})"));
  EXPECT_FALSE(WantsStream("{"));
}

TEST(UpstreamTest, ParsesUrls) {
  auto a = ParseUpstreamUrl("http://127.0.0.1:8100/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8100);
  EXPECT_EQ(a->ToString(), "http://127.0.0.1:8100");
  EXPECT_TRUE(ParseUpstreamUrl("localhost:9").ok());
  auto tls = ParseUpstreamUrl("https://x:1/");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->https);
  EXPECT_EQ(tls->ToString(), "https://x:1");
  EXPECT_FALSE(a->https);
  for (const char* bad : {"http://x", "x:0", "x:70000", "x:1/v1", ":80", "x:1a"}) {
    EXPECT_EQ(ParseUpstreamUrl(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace kvferry::proxy
