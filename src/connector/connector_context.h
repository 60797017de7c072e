// ConnectorContext: what every part of one FerryConnector shares — its settings (immutable after
// creation), its identity, and its statistics. Registration, Producer, Consumer and
// RemoteReleaser each hold a pointer to the one context their FerryConnectorImpl owns.
//
// Thread-safety: the settings are read-only, so any thread may read them; `stats` is guarded by
// its own mutex (UpdateStats / Snapshot from any thread: the engine thread, handshake and
// release jobs, a /metrics reader).
#pragma once

#include <string>

#include "connector/side_channel_keys.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/connector_stats.h"
#include "kvferry/connector/kv_transfer_config.h"

namespace kvferry::connector::internal {

// The connector's counters behind one mutex.
class StatsBox {
 public:
  template <typename F>
  void Update(F f) {
    MutexLock lock(&mu_);
    f(stats_);
  }
  ConnectorStats Snapshot() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  mutable Mutex mu_;
  ConnectorStats stats_ GUARDED_BY(mu_);
};

struct ConnectorContext {
  const KvTransferConfig config;
  const SideChannelKeys keys;  // CURVE material, or the plaintext rules
  const FerryConnectorOptions options;
  const std::string engine_id;
  StatsBox stats;
};

}  // namespace kvferry::connector::internal
