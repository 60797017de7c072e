#include "cluster/member_load.h"

#include <gtest/gtest.h>

namespace kvferry::cluster {
namespace {

TEST(MemberLoadTest, ReadsKvferrySeries) {
  const char* text =
      "# HELP kvferry:num_requests Requests in the engine, by state.\n"
      "# TYPE kvferry:num_requests gauge\n"
      "kvferry:num_requests{state=\"running\"} 3\n"
      "kvferry:num_requests{state=\"waiting\"} 2\n"
      "kvferry:num_requests{state=\"waiting_for_remote_kv\"} 1\n"
      "kvferry:kv_blocks{state=\"free\"} 100\n"
      "kvferry:kv_blocks{state=\"cached\"} 20\n"
      "kvferry:kv_blocks{state=\"used\"} 7\n"
      "kvferry:kv_blocks_total 127\n"
      "kvferry:pending_prefill_tokens 4096\n"
      "kvferry:prefix_cache_hit_tokens_total 160\n"
      "kvferry:time_to_first_token_seconds_bucket{le=\"0.1\"} 5\n";
  MemberLoad want;
  want.engine = EngineKind::kKvferry;
  want.running = 3;
  want.waiting = 3;
  want.free_kv_blocks = 120;
  want.total_kv_blocks = 127;
  want.pending_prefill_tokens = 4096;
  want.prefix_cache_hit_tokens = 160;
  EXPECT_EQ(ParseMemberLoad(text), want);
}

TEST(MemberLoadTest, ReadsVllmRequestCountsAndSkipsJunk) {
  // As vLLM 0.32.0 writes them: every series labelled, one label set per engine core.
  const MemberLoad l = ParseMemberLoad(
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 9.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 4.0\r\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 5.0\n"
      "vllm:num_requests_waiting_for_remote_kvs{engine=\"0\",model_name=\"m\"} 7.0\n"
      "vllm:kvferry_pulls_total{engine=\"0\",model_name=\"m\"} 3.0\n"
      "kvferry:kv_blocks_total notanumber\n"
      "no_value_here\n"
      " \n");
  EXPECT_EQ(l.engine, EngineKind::kVllm);
  EXPECT_EQ(l.running, 13);
  EXPECT_EQ(l.waiting, 5);
  EXPECT_EQ(l.total_kv_blocks, 0);
}

TEST(MemberLoadTest, AnInstanceWithoutKnownSeriesRunsAnUnknownEngine) {
  EXPECT_EQ(ParseMemberLoad("process_cpu_seconds_total 1.5\n").engine, EngineKind::kUnknown);
  EXPECT_EQ(ParseMemberLoad("").engine, EngineKind::kUnknown);
  EXPECT_EQ(EngineKindName(EngineKind::kVllm), "vllm");
}

}  // namespace
}  // namespace kvferry::cluster
