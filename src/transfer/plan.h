// Transfer planning: merges descriptor pairs that are adjacent on both sides. Pure functions,
// no side effects (docs/architecture.md, conventions: "Plan, then apply"); the Agent validates
// before calling.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "kvferry/transfer/types.h"

namespace kvferry::transfer {

struct DescriptorPair {
  Descriptor local;
  Descriptor remote;
};

// Merges consecutive pairs i, i+1 when local[i+1] starts where local[i] ends in the same local
// region and remote[i+1] starts where remote[i] ends in the same remote region. Order is kept;
// non-consecutive pairs are never reordered or merged.
std::vector<DescriptorPair> MergeAdjacent(const DescriptorList& local,
                                          const DescriptorList& remote);

}  // namespace kvferry::transfer
