// BlockEvent: what a BlockPool's prefix cache did to its full blocks, for whoever tells the rest of
// a cluster where KV lives (docs/kv_events.md). The pool records them only when asked
// (BlockPoolOptions::record_events); its owner takes them after each step (BlockPool::TakeEvents)
// and hands them on.
//
// kStored: blocks entered the prefix cache, in chain order: block_hashes[i]'s parent is
//   block_hashes[i-1], and block_hashes[0]'s is parent_block_hash (none: it starts a chain).
//   token_ids holds block_hashes.size() full blocks of tokens, in the same order.
// kRemoved: the cache entries of block_hashes are gone (evicted for reuse, or invalidated).
// kAllCleared: every entry is gone.
// tier: where the blocks are: kMemory (the pool's RAM blocks; "CPU" on the wire) or kDisk (the
//   engine's disk tier, kv_offload::DiskTier; "STORAGE" on the wire). A block can be in both;
//   each tier's events stand alone.
//
// Plain values; no thread-safety of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvferry::kv {

using BlockHash = uint64_t;

struct BlockEvent {
  enum class Kind { kStored, kRemoved, kAllCleared };
  enum class Tier { kMemory, kDisk };
  Kind kind = Kind::kStored;
  std::vector<BlockHash> block_hashes;
  std::optional<BlockHash> parent_block_hash;  // kStored only
  std::vector<int32_t> token_ids;              // kStored only
  Tier tier = Tier::kMemory;
  friend bool operator==(const BlockEvent&, const BlockEvent&) = default;
};

}  // namespace kvferry::kv
