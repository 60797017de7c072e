#include "proxy/prefix_pull.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::proxy {
namespace {

using nlohmann::json;

TEST(PrefixPullTest, LeaseBodyAsksForOneTokenPastTheBlocks) {
  const std::vector<int32_t> ids = {5, 6, 7, 8, 9, 10};
  auto body = BuildPrefixLeaseBody(R"({"model": "m", "prompt": "x"})", ids, 4);
  ASSERT_TRUE(body.ok()) << body.status();
  const json j = json::parse(*body);
  EXPECT_EQ(j["prompt"], json({5, 6, 7, 8, 9}));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["max_tokens"], 1);
  EXPECT_EQ(j["kv_transfer_params"]["do_remote_decode"], true);
  EXPECT_FALSE(BuildPrefixLeaseBody("{}", ids, 6).ok());  // no token left to compute
}

TEST(PrefixPullTest, PsParamsAreTheSourcesCutToTheLease) {
  const json source = {{"do_remote_prefill", true},
                       {"remote_engine_id", "p1"},
                       {"remote_request_id", "r"},
                       {"remote_block_ids", {3, 4, 9}},
                       {"remote_block_generations", {1, 2, 3}},
                       {"remote_host", "127.0.0.1"},
                       {"remote_port", 5},
                       {"remote_num_tokens", 33},
                       {"first_token_id", 7},
                       {"first_token_logprob", -0.5},
                       {"sampling_seed", 1}};
  auto body =
      WithPrefixSource(R"({"prompt": "x", "kv_transfer_params": {"do_remote_decode": true}})",
                       source.dump(), 32, 16);
  ASSERT_TRUE(body.ok()) << body.status();
  const json kv = json::parse(*body)["kv_transfer_params"];
  EXPECT_EQ(kv["remote_block_ids"], json({3, 4}));
  EXPECT_EQ(kv["remote_block_generations"], json({1, 2}));
  EXPECT_EQ(kv["remote_num_tokens"], 32);
  EXPECT_EQ(kv["do_remote_prefill"], true);
  EXPECT_EQ(kv["do_remote_decode"], true);
  EXPECT_FALSE(kv.contains("first_token_id"));
  EXPECT_FALSE(kv.contains("sampling_seed"));
  EXPECT_EQ(kv["remote_engine_id"], "p1");
  EXPECT_FALSE(WithPrefixSource("{}", source.dump(), 64, 16).ok());  // more blocks than offered
  EXPECT_FALSE(WithPrefixSource("{}", source.dump(), 20, 16).ok());  // not whole blocks
}

TEST(PrefixPullTest, ALeaseThatFailsLeavesTheBodyAsItWasAndIsCounted) {
  // Nothing listens on port 1 of loopback: the lease request is refused at connect.
  PrefixPuller pull(UpstreamAccess{}, 500, 16);
  const PrefixSource source{"p1", "http://127.0.0.1:1", 16, 16};
  const std::vector<int32_t> ids(40, 3);
  bool leased = true;
  const std::string body = R"({"prompt": "x", "kv_transfer_params": {"do_remote_decode": true}})";
  EXPECT_EQ(pull.BodyFor(source, ids, R"({"prompt": "x"})", body, "req", &leased), body);
  EXPECT_FALSE(leased);
  EXPECT_NE(
      pull.RenderMetrics().find("kvferry:proxy_prefix_pulls_total{outcome=\"lease_failed\"} 1"),
      std::string::npos)
      << pull.RenderMetrics();
}

}  // namespace
}  // namespace kvferry::proxy
