// Instance: one engine and, for P/D, its FerryConnector — the one place that builds the pair in
// the order they need and tears it down in the reverse.
//
// Order: the connector first (the engine asks it for its cache memory and registers the cache
// with it while it is created), then the engine; on destruction the engine first (its cache may
// be the connector's transfer-agent memory, and its scheduler still holds the connector's
// halves), then whatever stood between them, then the connector. Everything that serves a model
// — EngineLoop, the pull benches, the in-process P/D tests — builds it here.
//
//   KVF_ASSIGN_OR_RETURN(auto inst, Instance::Create({.engine = config, .kv_transfer = kv}));
//   inst->engine().AddRequest(...); while (inst->engine().HasWork()) inst->engine().Step();
//
// Thread-safety: as engine::Engine — one thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "kvferry/common/status.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/connector/kv_transfer_config.h"
#include "kvferry/engine/engine.h"

namespace kvferry::server {

struct InstanceOptions {
  // The connector halves and kv_load_failure_policy are filled in from `kv_transfer`.
  engine::EngineConfig engine;
  std::optional<connector::KvTransferConfig> kv_transfer;  // none: colocated only
  // Optional, tests: something that stands between the connector's worker half and the engine
  // (it must forward every call to the worker it is given), e.g. to record what the engine
  // consumed. Called once, before the engine is created.
  std::function<std::unique_ptr<connector::ConnectorWorker>(connector::ConnectorWorker*)>
      wrap_worker;
};

class Instance {
 public:
  // The connector's creation error (InvalidArgument for a config it cannot run, Unavailable for
  // a transport that cannot start), else the engine's.
  static StatusOr<std::unique_ptr<Instance>> Create(InstanceOptions options);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  engine::Engine& engine() const { return *engine_; }
  // Null for a colocated instance.
  connector::FerryConnector* connector() const { return connector_.get(); }

 private:
  Instance() = default;

  std::unique_ptr<connector::FerryConnector> connector_;
  std::unique_ptr<connector::ConnectorWorker> worker_wrapper_;
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace kvferry::server
