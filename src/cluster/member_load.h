// MemberLoad: the load figures the proxy routes by, read from an instance's /metrics
// (Prometheus text; docs/serving.md, "Metrics"), and the parser that reads them.
//
// A prefill instance is loaded by the prompt tokens it has still to compute
// (kvferry:pending_prefill_tokens); a decode instance by the sequences it runs or queues
// (kvferry:num_requests) and the KV blocks it has left (kvferry:kv_blocks free + cached, of
// kvferry:kv_blocks_total). vLLM's vllm:num_requests_running / _waiting are read too (summed over
// their label sets: vLLM labels every series with its model and engine index), so a proxy can
// front vLLM instances; series that are absent count as 0.
//
// The metric names also say which engine the instance runs: "kvferry:" series come from kvferry's
// engine, "vllm:" series from vLLM (KvferryConnector's own are "vllm:kvferry_*"). A P's KV is in
// its engine's format and reached through its engine's connector, so the proxy pairs a P only
// with a D of the same engine (cluster_state.h).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvferry::cluster {

enum class EngineKind : uint8_t { kUnknown, kKvferry, kVllm };
std::string_view EngineKindName(EngineKind e);  // "unknown", "kvferry", "vllm"

struct MemberLoad {
  EngineKind engine = EngineKind::kUnknown;
  int64_t pending_prefill_tokens = 0;
  int32_t running = 0;
  int32_t waiting = 0;          // includes requests waiting for remote KV
  int64_t free_kv_blocks = 0;   // free + cached (a cached block is reclaimed on demand)
  int64_t total_kv_blocks = 0;  // 0: unknown
  int64_t prefix_cache_hit_tokens = 0;

  bool operator==(const MemberLoad&) const = default;
};

// Lines that are not samples (comments, blank, malformed) are skipped.
MemberLoad ParseMemberLoad(std::string_view prometheus_text);

}  // namespace kvferry::cluster
