#include "connector/agent_cache_memory.h"

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
  KVF_ASSIGN_OR_RETURN(transfer::AllocatedMemory m, agent_->AllocateMemory(bytes));
  auto* base = static_cast<std::byte*>(m.addr);
  regions_[base] = m.region;
  return base;
}

void AgentCacheMemory::Release(std::byte* base) {
  MutexLock lock(&mu_);
  auto it = regions_.find(base);
  if (it == regions_.end()) return;
  // Frees it. After Detach the agent is gone, and its destruction freed everything it had.
  if (agent_ != nullptr) agent_->DeregisterMemory(it->second).IgnoreError();
  regions_.erase(it);
}

std::optional<transfer::RegionHandle> AgentCacheMemory::RegionOf(const std::byte* base) const {
  MutexLock lock(&mu_);
  auto it = regions_.find(base);
  if (it == regions_.end()) return std::nullopt;
  return it->second;
}

void AgentCacheMemory::Detach() {
  MutexLock lock(&mu_);
  agent_ = nullptr;
}

}  // namespace kvferry::connector::internal
