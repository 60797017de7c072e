#include "connector/agent_cache_memory.h"

#include <cstdlib>
#include <cstring>

#include "kvferry/common/logging.h"

namespace kvferry::connector::internal {

AgentCacheMemory::AgentCacheMemory(transfer::Agent* agent, std::string what)
    : what_(std::move(what)), agent_(agent) {}

kv::CacheMemory AgentCacheMemory::Hooks() {
  return kv::CacheMemory{
      [self = shared_from_this()](size_t bytes) { return self->Allocate(bytes); },
      [self = shared_from_this()](std::byte* base) { self->Release(base); }};
}

StatusOr<std::byte*> AgentCacheMemory::Allocate(size_t bytes) {
  MutexLock lock(&mu_);
  if (agent_ == nullptr) return FailedPreconditionError(what_ + ": the connector has shut down");
  StatusOr<transfer::AllocatedMemory> m = agent_->AllocateMemory(bytes);
  if (m.ok()) {
    auto* base = static_cast<std::byte*>(m->addr);
    regions_[base] = {m->region, false};
    return base;
  }
  if (!warned_) {
    KVF_LOG_WARN(
        "{}: the transfer agent could not allocate the KV cache ({}); it comes from the heap, "
        "and same-host pulls from it are not one memcpy",
        what_, m.status().ToString());
    warned_ = true;
  }
  constexpr size_t kAlign = 4096;
  auto* base =
      static_cast<std::byte*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (base == nullptr) {
    return ResourceExhaustedError(what_ + ": cannot allocate " + std::to_string(bytes) +
                                  " bytes of KV cache");
  }
  std::memset(base, 0, bytes);
  StatusOr<transfer::RegionHandle> h =
      agent_->RegisterMemory(base, bytes, transfer::MemoryKind::kHost);
  if (!h.ok()) {
    std::free(base);
    return h.status();
  }
  regions_[base] = {*h, true};
  return base;
}

void AgentCacheMemory::Release(std::byte* base) {
  MutexLock lock(&mu_);
  auto it = regions_.find(base);
  if (it == regions_.end()) return;
  // After Detach the agent is gone, and its destruction deregistered (and freed its own) memory.
  if (agent_ != nullptr) agent_->DeregisterMemory(it->second.handle).IgnoreError();
  if (it->second.heap) std::free(base);
  regions_.erase(it);
}

std::optional<transfer::RegionHandle> AgentCacheMemory::RegionOf(const std::byte* base) const {
  MutexLock lock(&mu_);
  auto it = regions_.find(base);
  if (it == regions_.end()) return std::nullopt;
  return it->second.handle;
}

void AgentCacheMemory::Detach() {
  MutexLock lock(&mu_);
  agent_ = nullptr;
}

}  // namespace kvferry::connector::internal
