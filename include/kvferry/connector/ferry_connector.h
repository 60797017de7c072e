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
#include "kvferry/connector/connector_stats.h"
#include "kvferry/connector/kv_transfer_config.h"

namespace kvferry::connector {

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
