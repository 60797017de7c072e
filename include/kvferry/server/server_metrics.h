// ServerMetrics: the named instruments `kvferry serve` exports on /metrics (docs/serving.md
// lists them), on top of a MetricsRegistry.
//
//   kvferry:http_requests_total{endpoint,code}          every answered HTTP request
//   kvferry:request_success_total{finished_reason}       stop | length | abort | error
//   kvferry:prompt_tokens_total, kvferry:generation_tokens_total
//   kvferry:time_to_first_token_seconds                  histogram (arrival -> first token)
//   kvferry:inter_token_latency_seconds                  histogram (between streamed outputs)
//   kvferry:e2e_request_latency_seconds                  histogram
//   kvferry:num_requests{state=running|waiting|waiting_for_remote_kv}
//   kvferry:pending_prefill_tokens                        prompt tokens not computed yet
//   kvferry:kv_blocks{state=free|cached|used|held_for_transfer}, kvferry:kv_blocks_total
//   kvferry:prefix_cache_hit_tokens_total, kvferry:num_preemptions_total
//   kvferry:kv_transfers_total, kvferry:kv_transfer_bytes_total,
//   kvferry:kv_transfer_descriptors_total, kvferry:kv_transfer_duration_seconds_total
//   kvferry:kv_transfer_failures_total{kind=handshake|transfer|deadline|generation}
//   kvferry:kv_leases_total{event=granted|released_by_notification|expired},
//   kvferry:kv_notifications_sent_total, kvferry:kv_staged_kernel_blocks_total
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <string>
#include <string_view>

#include "kvferry/connector/ferry_connector.h"
#include "kvferry/engine/engine.h"
#include "kvferry/server/metrics.h"

namespace kvferry::server {

class ServerMetrics {
 public:
  ServerMetrics();

  MetricsRegistry& registry() { return registry_; }
  std::string Render() const { return registry_.RenderPrometheus(); }

  void OnHttpResponse(std::string_view endpoint, int http_status);
  void OnRequestFinished(std::string_view finish_reason, int32_t prompt_tokens,
                         int32_t generation_tokens, double e2e_seconds);
  void OnFirstToken(double seconds) { ttft_->Observe(seconds); }
  void OnNextTokens(double seconds) { itl_->Observe(seconds); }

  // Snapshots taken by the engine thread.
  void UpdateEngine(const engine::EngineStats& stats);
  void UpdateConnector(const connector::ConnectorStats& stats);
  void UpdateKvOffload(const kv_offload::DiskTierStats& stats);  // only with a disk tier

 private:
  // The snapshot families: a gauge's value, a counter's running total (the engine's own count).
  void SetGauge(const char* name, const char* help, const Labels& labels, double v);
  void SetGauge(const char* name, const char* help, double v) { SetGauge(name, help, {}, v); }
  void SetTotal(const char* name, const char* help, const Labels& labels, double v);
  void SetTotal(const char* name, const char* help, double v) { SetTotal(name, help, {}, v); }

  MetricsRegistry registry_;
  Histogram* ttft_;
  Histogram* itl_;
  Histogram* e2e_;
  Counter* prompt_tokens_;
  Counter* generation_tokens_;
};

}  // namespace kvferry::server
