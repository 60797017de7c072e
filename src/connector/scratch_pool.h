// ScratchPool: one D rank's registered scratch areas (staging slots for a re-laid-out pull,
// then the generation slots), kept for the next load instead of being allocated, faulted in,
// registered, deregistered and freed on every pull — for a 4k-token pull of `small` that was
// most of the pull's time. Keeps at most `max_areas` areas and `max_bytes` bytes; an area
// given back beyond that is deregistered and freed at once.
//
// An area's contents are whatever the previous load left: every byte a load reads is written
// by its own READ first. The poisoning rule (transfer/agent.h) is the caller's: an area whose
// transfer failed is given back only after the connection that wrote into it was closed.
//
// Used by the Consumer (engine thread); not thread-safe. Destroy before the agent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::connector::internal {

struct ScratchArea {
  std::unique_ptr<std::byte[]> data;
  uint64_t capacity = 0;
  transfer::RegionHandle region;
};

class ScratchPool {
 public:
  ScratchPool(transfer::Agent* agent, size_t max_areas, uint64_t max_bytes);
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // The smallest kept area of at least `bytes`, or a new one registered with the agent.
  StatusOr<ScratchArea> Acquire(uint64_t bytes);
  void GiveBack(ScratchArea area);

  size_t kept_areas() const { return kept_.size(); }

 private:
  void Free(ScratchArea& area);

  transfer::Agent* const agent_;
  const size_t max_areas_;
  const uint64_t max_bytes_;
  std::vector<ScratchArea> kept_;
  uint64_t kept_bytes_ = 0;
};

}  // namespace kvferry::connector::internal
