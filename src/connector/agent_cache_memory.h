// AgentCacheMemory: one tensor-parallel rank's KV cache regions, allocated through that rank's
// transfer agent (kv::CacheMemory hooks the engine passes to kv::KvCache::Allocate). With UCX
// that memory is shared memory a D on the same host maps, so a direct-mode pull from this cache
// is one memcpy by D (docs/connector.md, "One-copy pulls"). Remembers each allocation's region
// handle, so the connector registers nothing twice. When shared memory runs out the agent itself
// falls back to ordinary memory (with a warning), and pulls from it take the transport's
// two-copy path (`kv_load.pulled_bytes_by_memcpy` says which).
//
// Lifetime: the hooks share ownership of this object. Detach() is called before the agent is
// destroyed; the agent's destruction frees what it allocated, so a later release is a no-op.
//
// Used by the connector's Registration only. Thread-safety: internally synchronised.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::connector::internal {

class AgentCacheMemory : public std::enable_shared_from_this<AgentCacheMemory> {
 public:
  // `what` names the owner in log lines ("connector E rank R").
  AgentCacheMemory(transfer::Agent* agent, std::string what);

  kv::CacheMemory Hooks();
  // The agent's region holding exactly the allocation at `base`, if this object made it.
  std::optional<transfer::RegionHandle> RegionOf(const std::byte* base) const;
  void Detach();

 private:
  StatusOr<std::byte*> Allocate(size_t bytes);
  void Release(std::byte* base);

  const std::string what_;
  mutable Mutex mu_;
  transfer::Agent* agent_ GUARDED_BY(mu_);
  std::map<const std::byte*, transfer::RegionHandle> regions_ GUARDED_BY(mu_);
};

}  // namespace kvferry::connector::internal
