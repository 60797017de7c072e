#include "connector/scratch_pool.h"

#include <algorithm>

namespace kvferry::connector::internal {

ScratchPool::ScratchPool(transfer::Agent* agent, size_t max_areas, uint64_t max_bytes)
    : agent_(agent), max_areas_(max_areas), max_bytes_(max_bytes) {}

ScratchPool::~ScratchPool() {
  for (ScratchArea& area : kept_) Free(area);
}

StatusOr<ScratchArea> ScratchPool::Acquire(uint64_t bytes) {
  auto best = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->capacity >= bytes && (best == kept_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != kept_.end()) {
    ScratchArea area = std::move(*best);
    kept_.erase(best);
    kept_bytes_ -= area.capacity;
    return area;
  }
  ScratchArea area;
  area.data.reset(new std::byte[bytes]);  // not zeroed: each load's READ writes what it reads
  area.capacity = bytes;
  KVF_ASSIGN_OR_RETURN(area.region,
                       agent_->RegisterMemory(area.data.get(), bytes, transfer::MemoryKind::kHost));
  return area;
}

void ScratchPool::GiveBack(ScratchArea area) {
  if (area.data == nullptr) return;
  if (kept_.size() >= max_areas_ || kept_bytes_ + area.capacity > max_bytes_) {
    Free(area);
    return;
  }
  kept_bytes_ += area.capacity;
  kept_.push_back(std::move(area));
}

void ScratchPool::Free(ScratchArea& area) {
  agent_->DeregisterMemory(area.region).IgnoreError();
  area.data.reset();
}

}  // namespace kvferry::connector::internal
