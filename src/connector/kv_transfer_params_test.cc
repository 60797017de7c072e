#include "kvferry/connector/kv_transfer_params.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::connector {
namespace {

using kv::LogicalBlockId;

TEST(KvTransferParamsTest, RoundTripsPrefillParams) {
  KvTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "prefill-0";
  p.remote_request_id = "req-7";
  p.remote_block_ids = {LogicalBlockId(3), LogicalBlockId(0), LogicalBlockId(9)};
  p.remote_host = "10.0.0.2";
  p.remote_port = 5600;
  p.tp_size = 1;
  p.remote_block_generations = {4, 1, 77};
  auto parsed = ParseKvTransferParams(ToJson(p));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, p);
}

TEST(KvTransferParamsTest, ParsesVllmProxyRequestAndIgnoresUnknownKeys) {
  auto j = nlohmann::json::parse(R"({"do_remote_decode": true, "do_remote_prefill": false,
      "remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
      "remote_port": null, "something_new": [1, 2]})");
  auto parsed = ParseKvTransferParams(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->do_remote_decode);
  EXPECT_FALSE(parsed->do_remote_prefill);
  EXPECT_TRUE(parsed->remote_block_ids.empty());
}

TEST(KvTransferParamsTest, PartialParamsRoundTrip) {
  // Found by fuzzing: fields set without do_remote_prefill must survive ToJson too.
  for (const char* text : {R"({"remote_port": 5})", R"({"remote_block_ids": [3]})",
                           R"({"remote_host": "h", "tp_size": 4})",
                           R"({"remote_request_id": "r", "do_remote_decode": true})"}) {
    auto parsed = ParseKvTransferParams(nlohmann::json::parse(text));
    ASSERT_TRUE(parsed.ok()) << text;
    auto again = ParseKvTransferParams(ToJson(*parsed));
    ASSERT_TRUE(again.ok()) << text;
    EXPECT_EQ(*again, *parsed) << text;
  }
}

TEST(KvTransferParamsTest, AcceptsRemoteTpSizeAlias) {
  auto j = nlohmann::json::parse(R"({"do_remote_prefill": true, "remote_engine_id": "e",
      "remote_request_id": "r", "remote_block_ids": [1], "remote_host": "h", "remote_port": 1,
      "remote_tp_size": 2})");
  auto parsed = ParseKvTransferParams(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tp_size, 2);
}

TEST(KvTransferParamsTest, RejectsBadFieldsNamingThem) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"do_remote_decode": "yes"})", "do_remote_decode"},
      {R"({"remote_block_ids": [1, -2]})", "remote_block_ids"},
      {R"({"remote_block_ids": [1, 3000000000]})", "remote_block_ids"},
      {R"({"remote_block_ids": "1,2"})", "remote_block_ids"},
      {R"({"remote_port": 70000})", "remote_port"},
      {R"({"remote_host": 5})", "remote_host"},
      {R"({"remote_block_ids": [1, 2], "remote_block_generations": [1]})",
       "remote_block_generations"},
      {R"({"do_remote_prefill": true, "remote_engine_id": "e", "remote_request_id": "r",
           "remote_block_ids": [1], "remote_port": 1})",
       "remote_host"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseKvTransferParams(nlohmann::json::parse(c.json));
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.field), std::string_view::npos)
        << parsed.status() << " should name " << c.field;
  }
  EXPECT_FALSE(ParseKvTransferParams(nlohmann::json::array()).ok());
}

TEST(KvTransferParamsTest, FirstTokenRoundTrips) {
  KvTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "p0";
  p.remote_request_id = "r";
  p.remote_block_ids = {LogicalBlockId(1)};
  p.remote_host = "h";
  p.remote_port = 9;
  // Values that float -> JSON double -> float must keep bit for bit.
  p.first_token =
      FirstToken{42, -0.123456789f, {{42, -0.123456789f}, {7, -3.75e-3f}}, 0xfedcba9876543210ull};
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j["first_token_id"], 42);
  EXPECT_EQ(j["sampling_seed"].get<uint64_t>(), 0xfedcba9876543210ull);
  EXPECT_EQ(j["first_token_top_logprobs"].size(), 2u);
  auto parsed = ParseKvTransferParams(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, p);
  // Without alternatives the field is left out, and parses back to none.
  p.first_token->top_logprobs.clear();
  EXPECT_FALSE(ToJson(p).contains("first_token_top_logprobs"));
  parsed = ParseKvTransferParams(ToJson(p));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, p);
}

TEST(KvTransferParamsTest, NoFirstTokenIsTheOlderHandoff) {
  auto parsed = ParseKvTransferParams(nlohmann::json::parse(
      R"({"do_remote_prefill": true, "remote_engine_id": "e", "remote_request_id": "r",
          "remote_block_ids": [1], "remote_host": "h", "remote_port": 1})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->first_token.has_value());
  EXPECT_FALSE(ToJson(*parsed).contains("first_token_id"));
}

TEST(KvTransferParamsTest, RejectsBadFirstTokenFieldsNamingThem) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"first_token_id": -1, "first_token_logprob": 0, "sampling_seed": 1})", "first_token_id"},
      {R"({"first_token_id": "5", "first_token_logprob": 0, "sampling_seed": 1})",
       "first_token_id"},
      {R"({"first_token_id": 5, "sampling_seed": 1})", "first_token_logprob"},
      {R"({"first_token_id": 5, "first_token_logprob": -1})", "sampling_seed"},
      {R"({"first_token_id": 5, "first_token_logprob": 0.5, "sampling_seed": 1})",
       "first_token_logprob"},
      {R"({"first_token_id": 5, "first_token_logprob": "x", "sampling_seed": 1})",
       "first_token_logprob"},
      {R"({"first_token_id": 5, "first_token_logprob": -1, "sampling_seed": -3})", "sampling_seed"},
      {R"({"first_token_logprob": -1})", "first_token_logprob"},
      {R"({"first_token_top_logprobs": [[1, -1]]})", "first_token_top_logprobs"},
      {R"({"first_token_id": 5, "first_token_logprob": -1, "sampling_seed": 1,
           "first_token_top_logprobs": [[1]]})",
       "first_token_top_logprobs"},
      {R"({"first_token_id": 5, "first_token_logprob": -1, "sampling_seed": 1,
           "first_token_top_logprobs": [[-1, -1]]})",
       "first_token_top_logprobs"},
      {R"({"first_token_id": 5, "first_token_logprob": -1, "sampling_seed": 1,
           "first_token_top_logprobs": [[1, 2]]})",
       "first_token_top_logprobs"},
      {R"({"first_token_id": 5, "first_token_logprob": -1, "sampling_seed": 1,
           "first_token_top_logprobs": {"1": -1}})",
       "first_token_top_logprobs"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseKvTransferParams(nlohmann::json::parse(c.json));
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.field), std::string_view::npos)
        << parsed.status() << " should name " << c.field;
  }
}

}  // namespace
}  // namespace kvferry::connector
