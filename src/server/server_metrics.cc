#include "kvferry/server/server_metrics.h"

namespace kvferry::server {

ServerMetrics::ServerMetrics() {
  ttft_ = registry_.GetHistogram("kvferry:time_to_first_token_seconds",
                                 "Time from request arrival to its first generated token.",
                                 LatencyBucketsSeconds());
  itl_ = registry_.GetHistogram("kvferry:inter_token_latency_seconds",
                                "Time between two outputs of a request after the first token.",
                                LatencyBucketsSeconds());
  e2e_ = registry_.GetHistogram("kvferry:e2e_request_latency_seconds",
                                "Time from request arrival to its last output.",
                                LatencyBucketsSeconds());
  prompt_tokens_ =
      registry_.GetCounter("kvferry:prompt_tokens_total", "Prompt tokens of finished requests.");
  generation_tokens_ = registry_.GetCounter("kvferry:generation_tokens_total",
                                            "Generated tokens of finished requests.");
  // Create the snapshot families up front so /metrics shows them from the start.
  UpdateEngine(engine::EngineStats{});
  UpdateConnector(connector::ConnectorStats{});
}

void ServerMetrics::SetGauge(const char* name, const char* help, const Labels& labels, double v) {
  registry_.GetGauge(name, help, labels)->Set(v);
}

void ServerMetrics::SetTotal(const char* name, const char* help, const Labels& labels, double v) {
  registry_.GetCounter(name, help, labels)->SetTotal(v);
}

void ServerMetrics::OnHttpResponse(std::string_view endpoint, int http_status) {
  registry_
      .GetCounter("kvferry:http_requests_total", "HTTP requests answered, by endpoint and code.",
                  {{"endpoint", std::string(endpoint)}, {"code", std::to_string(http_status)}})
      ->Inc();
}

void ServerMetrics::OnRequestFinished(std::string_view finish_reason, int32_t prompt_tokens,
                                      int32_t generation_tokens, double e2e_seconds) {
  registry_
      .GetCounter("kvferry:request_success_total", "Finished generation requests, by reason.",
                  {{"finished_reason", std::string(finish_reason)}})
      ->Inc();
  prompt_tokens_->Inc(prompt_tokens);
  generation_tokens_->Inc(generation_tokens);
  e2e_->Observe(e2e_seconds);
}

void ServerMetrics::UpdateEngine(const engine::EngineStats& s) {
  const char* kReq = "Requests in the engine, by state.";
  SetGauge("kvferry:num_requests", kReq, {{"state", "running"}}, s.num_running);
  SetGauge("kvferry:num_requests", kReq, {{"state", "waiting"}}, s.num_waiting);
  SetGauge("kvferry:num_requests", kReq, {{"state", "waiting_for_remote_kv"}},
           s.num_waiting_for_remote_kv);
  SetGauge("kvferry:pending_prefill_tokens",
           "Prompt tokens of waiting and running requests not computed yet.", {},
           static_cast<double>(s.num_pending_prefill_tokens));
  const char* kBlocks = "Logical KV blocks of the pool, by state.";
  SetGauge("kvferry:kv_blocks", kBlocks, {{"state", "free"}}, s.num_blocks_free);
  SetGauge("kvferry:kv_blocks", kBlocks, {{"state", "cached"}}, s.num_blocks_cached);
  SetGauge("kvferry:kv_blocks", kBlocks, {{"state", "used"}}, s.num_blocks_used);
  SetGauge("kvferry:kv_blocks", kBlocks, {{"state", "held_for_transfer"}}, s.num_blocks_held);
  SetGauge("kvferry:kv_blocks_total", "Logical KV blocks in the pool.", {}, s.num_blocks_total);
  SetTotal("kvferry:prefix_cache_hit_tokens_total",
           "Prompt tokens served from the local prefix cache.",
           static_cast<double>(s.num_prefix_cache_hit_tokens));
  SetTotal("kvferry:kv_offload_hit_tokens_total",
           "Of the prompt tokens served from the prefix cache, those read back from the disk tier.",
           static_cast<double>(s.num_disk_hit_tokens));
  SetTotal("kvferry:num_preemptions_total", "Requests preempted (recomputed later).",
           static_cast<double>(s.num_preemptions));
  SetTotal("kvferry:engine_steps_total", "Engine steps run.", static_cast<double>(s.num_steps));
}

void ServerMetrics::UpdateKvOffload(const kv_offload::DiskTierStats& s) {
  SetGauge("kvferry:kv_offload_files", "Block files of the disk tier.",
           static_cast<double>(s.files));
  SetGauge("kvferry:kv_offload_bytes", "Bytes of the disk tier's block files.",
           static_cast<double>(s.bytes));
  SetGauge("kvferry:kv_offload_capacity_bytes", "The disk tier's capacity (--kv-offload-gb).",
           static_cast<double>(s.capacity_bytes));
  SetGauge("kvferry:kv_offload_pending_bytes", "Block bytes queued for writing.",
           static_cast<double>(s.pending_bytes));
  SetGauge("kvferry:kv_offload_paused",
           "1 while offloading is paused after a failed write (a full disk); reads go on.",
           s.paused ? 1 : 0);
  SetTotal("kvferry:kv_offload_stored_total", "Block files written.",
           static_cast<double>(s.stored));
  SetTotal("kvferry:kv_offload_loaded_total", "Blocks read back from disk.",
           static_cast<double>(s.loaded));
  SetTotal("kvferry:kv_offload_corrupt_total",
           "Damaged block files found (torn, truncated, checksum) and deleted: misses.",
           static_cast<double>(s.corrupt));
  SetTotal("kvferry:kv_offload_evicted_total", "Block files deleted to stay within capacity.",
           static_cast<double>(s.evicted));
  SetTotal("kvferry:kv_offload_write_errors_total", "Failed writes (each pauses offloading).",
           static_cast<double>(s.write_errors));
  SetTotal("kvferry:kv_offload_dropped_total",
           "Blocks not written: offloading paused, the write queue full, or larger than capacity.",
           static_cast<double>(s.dropped));
}

void ServerMetrics::UpdateConnector(const connector::ConnectorStats& s) {
  SetTotal("kvferry:kv_transfers_total", "Completed KV pulls (decode side).", {},
           static_cast<double>(s.transfers));
  SetTotal("kvferry:kv_transfer_tokens_total", "Prompt tokens whose KV was pulled.", {},
           static_cast<double>(s.tokens));
  SetTotal("kvferry:kv_transfer_bytes_total", "Bytes moved by KV pulls.", {},
           static_cast<double>(s.bytes));
  SetTotal("kvferry:kv_transfer_memcpy_bytes_total",
           "Of the bytes moved by KV pulls, those read by one memcpy from the prefill instance's "
           "memory mapped into this process (same host).",
           {}, static_cast<double>(s.bytes_by_memcpy));
  SetTotal("kvferry:kv_transfer_descriptors_total", "Transfer descriptors posted by KV pulls.", {},
           static_cast<double>(s.descriptors));
  SetTotal("kvferry:kv_transfer_duration_seconds_total",
           "KV pull time, post to completion, summed.", {},
           static_cast<double>(s.duration_us_total) / 1e6);
  const char* kFail = "KV loads that failed, by kind.";
  SetTotal("kvferry:kv_transfer_failures_total", kFail, {{"kind", "handshake"}},
           static_cast<double>(s.failures_handshake));
  SetTotal("kvferry:kv_transfer_failures_total", kFail, {{"kind", "transfer"}},
           static_cast<double>(s.failures_transfer));
  SetTotal("kvferry:kv_transfer_failures_total", kFail, {{"kind", "deadline"}},
           static_cast<double>(s.failures_deadline));
  SetTotal("kvferry:kv_transfer_failures_total", kFail, {{"kind", "generation"}},
           static_cast<double>(s.failures_generation));
  const char* kLease = "Block leases held for remote readers (prefill side), by event.";
  SetTotal("kvferry:kv_leases_total", kLease, {{"event", "granted"}},
           static_cast<double>(s.leases_granted));
  SetTotal("kvferry:kv_leases_total", kLease, {{"event", "released_by_notification"}},
           static_cast<double>(s.leases_released_by_notification));
  SetTotal("kvferry:kv_leases_total", kLease, {{"event", "expired"}},
           static_cast<double>(s.leases_expired));
  SetTotal("kvferry:kv_notifications_sent_total", "Read-done notifications sent to prefill.", {},
           static_cast<double>(s.notifications_sent));
  SetTotal("kvferry:kv_notify_only_total",
           "Requests whose KV the decode side already held (notification, no data read).", {},
           static_cast<double>(s.notify_only));
  SetTotal("kvferry:kv_stage_failures_total", "Chunks whose copy into the host buffer failed.", {},
           static_cast<double>(s.stage_failures));
  SetTotal("kvferry:kv_blocks_withheld_total",
           "Logical blocks not offered to the decode side because their staging failed.", {},
           static_cast<double>(s.blocks_withheld));
  SetTotal("kvferry:kv_staged_kernel_blocks_total", "Kernel blocks staged into the host buffer.",
           {}, static_cast<double>(s.staged_kernel_blocks));
  SetTotal("kvferry:kv_notifications_duplicate_total",
           "Read-done notifications from an agent already heard for that request (ignored).", {},
           static_cast<double>(s.notifications_duplicate));
  for (const auto& [reason, n] : s.refused_inbound) {
    SetTotal("kvferry:transfer_refused_inbound_total",
             "What the transfer agents refused from peers (prefill and decode side), by reason.",
             {{"reason", reason}}, static_cast<double>(n));
  }
  registry_
      .GetGauge("kvferry:kv_connector_blocks_held",
                "Logical blocks the connector holds for remote readers (prefill side).")
      ->Set(static_cast<double>(s.blocks_held));
}

}  // namespace kvferry::server
