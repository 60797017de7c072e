// FerryConnector: kvferry's P/D connector (docs/connector.md). One object per
// engine holds both halves of connector.h plus what they share (one transfer agent per
// tensor-parallel rank, the side channel, the lease table), and the statistics /metrics exports.
//
//   auto cfg = ParseKvTransferConfig(json_text);
//   auto conn = CreateFerryConnector(*cfg, {.model_name = "tiny"});
//   engine options: scheduler = conn->scheduler(), worker = conn->worker()
//   ... conn->worker()->RegisterKvCaches(rank caches, sharding, block_size_logical) (engine) ...
//   /metrics: conn->Stats()
//
// Thread-safety: scheduler() and worker() follow connector.h (engine thread only). Stats(),
// side_channel_port() and engine_id() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"
#include "kvferry/connector/kv_transfer_config.h"

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
  int64_t blocks_held = 0;  // P logical blocks currently held for remote readers
  // P: host-buffer staging.
  uint64_t staged_kernel_blocks = 0;
  uint64_t stage_failures = 0;   // chunks whose copy into the host buffer failed
  uint64_t blocks_withheld = 0;  // logical blocks not offered to D because their staging failed
};

// What the JSON config does not carry. Values.
struct FerryConnectorOptions {
  // Enters the handshake's compatibility hash together with the cache's dtype, KV heads, head
  // dim and layers: a P and a D of different models refuse each other.
  std::string model_name;
  // Tensor-parallel ranks of this instance (the engine's tensor_parallel_size): one transfer
  // agent each; RegisterKvCaches must then bring that many caches.
  int32_t tp_size = 1;
};

class FerryConnector {
 public:
  virtual ~FerryConnector() = default;

  virtual ConnectorScheduler* scheduler() = 0;
  virtual ConnectorWorker* worker() = 0;
  virtual ConnectorStats Stats() const = 0;
  virtual const KvTransferConfig& config() const = 0;
  // This instance's engine id (config.engine_id, or the generated one).
  virtual const std::string& engine_id() const = 0;
  // The bound side-channel port (the configured one, or the ephemeral one picked when the
  // configured port is 0). 0 until RegisterKvCache has started the side channel.
  virtual int32_t side_channel_port() const = 0;
  virtual int32_t tp_size() const = 0;
  // The name of rank `rank`'s transfer agent: the engine id at TP 1, "<engine id>.tp<rank>"
  // otherwise (what peers see in notifications; what loopback fault injection names).
  virtual std::string AgentName(int32_t rank) const = 0;
};

// Creates the connector and its transfer agents (config.backend), one per TP rank. Nothing
// listens before the worker's RegisterKvCache(s). InvalidArgument for a config the connector
// cannot run (e.g. kv_connector not ours, tp_size < 1); Unavailable when the backend cannot
// start.
StatusOr<std::unique_ptr<FerryConnector>> CreateFerryConnector(
    const KvTransferConfig& config, const FerryConnectorOptions& options);

}  // namespace kvferry::connector
