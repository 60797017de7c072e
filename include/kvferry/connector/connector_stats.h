// The FerryConnector's value types apart from the connector itself: its statistics snapshot and
// the options the JSON config does not carry. Plain values; any thread. Included by
// ferry_connector.h and by the connector's parts, which need these without the factory.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace kvferry::connector {

// A snapshot of the connector's counters since creation (monotonic, except blocks_held).
struct ConnectorStats {
  // D: completed pulls (one per request that moved bytes; a notification-only full hit is not
  // a transfer) and what they moved.
  uint64_t transfers = 0;
  uint64_t tokens = 0;  // prompt tokens whose KV the completed pulls moved
  uint64_t bytes = 0;
  uint64_t descriptors = 0;
  uint64_t bytes_by_memcpy = 0;     // of `bytes`, read by one memcpy from P's mapped memory
  uint64_t duration_us_total = 0;   // post to completion, summed over transfers
  uint64_t notifications_sent = 0;  // with each rank read's last READ, or alone (notify_only)
  uint64_t notify_only = 0;         // requests whose KV D already held: notification, no data read
  uint64_t handshakes = 0;  // completed handshakes (one per remote engine, again after a drop)
  // D: loads that failed, by kind.
  uint64_t failures_handshake = 0;
  uint64_t failures_transfer = 0;
  uint64_t failures_deadline = 0;
  uint64_t failures_generation = 0;  // P reused the blocks (lease ran out) before D's read ended
  // P: leases.
  uint64_t leases_granted = 0;
  uint64_t leases_released_by_notification = 0;
  uint64_t leases_expired = 0;
  // With an outside scheduler: D notifications for no live lease, kept for a hold still to
  // come.
  uint64_t notifications_before_hold = 0;
  // With an outside scheduler: side-channel releases for no live lease, kept for a hold still to
  // come (which then ends at once).
  uint64_t releases_before_hold = 0;
  // D notifications that came after their lease ended (expired, released, a hold that ended
  // at once, a D reading a retried request's old params): nothing left to free.
  uint64_t notifications_late = 0;
  // D notifications from an agent already heard for that request and rank (a retried post, or
  // a peer repeating itself): ignored, they end no lease share.
  uint64_t notifications_duplicate = 0;
  int64_t blocks_held = 0;  // P logical blocks currently held for remote readers
  // P: host-buffer staging.
  uint64_t staged_kernel_blocks = 0;
  uint64_t stage_failures = 0;   // chunks whose copy into the host buffer failed
  uint64_t blocks_withheld = 0;  // logical blocks not offered to D because their staging failed
  // What this connector's transfer agents refused from peers (socket backend: inbound frames
  // and connections, ranges outside the registered memory), by reason, summed over its ranks,
  // as of the last GetFinished (transfer::AgentStats; docs/reliability.md, "Hostile peers").
  std::map<std::string, uint64_t> refused_inbound;
};

// What the JSON config does not carry. Values.
struct FerryConnectorOptions {
  // Enters the handshake's compatibility hash together with the cache's dtype, KV heads, head
  // dim and layers: a P and a D of different models refuse each other.
  std::string model_name;
  // Tensor-parallel ranks of this instance (the engine's tensor_parallel_size): one transfer
  // agent each; RegisterKvCaches must then bring that many caches.
  int32_t tp_size = 1;
  // An engine whose tensor-parallel ranks run in separate processes (vLLM's TP workers), one
  // FerryConnector each: this connector's ranks are [first_rank, first_rank + tp_size) of the
  // engine's engine_tp_size (0: tp_size, the whole engine in this connector). Each such
  // connector serves its own ranks' metadata on its side channel; a D finds the side channel
  // of the engine's rank r at the port kv_transfer_params names (rank 0's) plus r, as vLLM's
  // NixlConnector does. RegisterKvCaches then takes the ENGINE's sharding.
  int32_t first_rank = 0;
  int32_t engine_tp_size = 0;
  // The engine's scheduler is not this connector's scheduler half (vLLM's, python/kvferry/vllm):
  // P's holds and host-buffer saves arrive in ConnectorMetadata (holds, saves), a step after
  // the kv_transfer_params left, so a D's notification may come before its hold and is kept
  // for it.
  bool external_scheduler = false;
};

}  // namespace kvferry::connector
