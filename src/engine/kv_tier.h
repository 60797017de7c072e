// KvTier (internal to the engine): the engine's side of the disk tier (docs/kv_offload.md) —
// which bytes of its tensor-parallel ranks' caches make up one logical block, copied out to a
// kv_offload::DiskTier and back in. A block's payload is, rank by rank and region by region, the
// contiguous bytes of its kernel blocks: the layout key (LayoutKey) names everything that shapes
// them, so files written under another dtype, layout, block size, head split or TP size are
// never read.
//
// Thread-safety: the engine thread calls it (the scheduler, between forward passes, when no
// rank is writing the cache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvferry/kv/block_events.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv_offload/disk_tier.h"

namespace kvferry::engine {

class KvTier {
 public:
  KvTier(std::unique_ptr<kv_offload::DiskTier> disk, std::vector<kv::KvCache*> caches,
         kv::BlockGeometry geometry);

  // What the payload's bytes depend on: every rank's cache spec (less its block count), the
  // rank count and the logical block size.
  static uint64_t LayoutKey(const std::vector<kv::KvCache*>& caches,
                            const kv::BlockGeometry& geometry);

  bool Contains(kv::BlockHash hash) const { return disk_->Contains(hash); }
  // Queues a copy of block `id` as block `hash` of `prefix` (whole blocks, ending with it).
  void Store(kv::BlockHash hash, std::optional<kv::BlockHash> parent,
             std::span<const int32_t> prefix, kv::LogicalBlockId id);
  // Fills block `id` with block `hash` of `prefix`; false (nothing written) on a miss.
  bool Load(kv::BlockHash hash, std::span<const int32_t> prefix, kv::LogicalBlockId id);

  kv_offload::DiskTier& disk() { return *disk_; }
  const kv_offload::DiskTier& disk() const { return *disk_; }

 private:
  // Calls fn(bytes, size) for each contiguous piece of block `id`, in payload order.
  template <typename Fn>
  void ForEachPiece(kv::LogicalBlockId id, Fn&& fn) const;

  std::unique_ptr<kv_offload::DiskTier> disk_;
  std::vector<kv::KvCache*> caches_;
  kv::BlockGeometry geometry_;
  size_t block_bytes_ = 0;  // payload size
};

}  // namespace kvferry::engine
