// BlockTable: one request's logical block ids and, derived from them through BlockGeometry,
// its kernel block ids — the only place the engine gets kernel ids from.
//
// The table does not own pool references: whoever Allocate()s / Touch()es blocks in the
// BlockPool appends them here and Free()s them when the request ends.
//
// Thread-safety: a value; externally synchronized (engine thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::kv {

class BlockTable {
 public:
  explicit BlockTable(const BlockGeometry& geometry) : geometry_(geometry) {}

  const BlockGeometry& geometry() const { return geometry_; }

  // Appends logical blocks (and their R kernel blocks each). Ids must be >= 0 (checked; aborts).
  void Append(LogicalBlockId id);
  void Append(std::span<const LogicalBlockId> ids);
  // Keeps the first `num_blocks_logical` blocks (<= size, checked; aborts).
  void Truncate(int32_t num_blocks_logical);
  void Clear() { Truncate(0); }

  std::span<const LogicalBlockId> logical_ids() const { return logical_; }
  std::span<const KernelBlockId> kernel_ids() const { return kernel_; }
  int32_t num_blocks_logical() const { return static_cast<int32_t>(logical_.size()); }
  int32_t num_blocks_kernel() const { return static_cast<int32_t>(kernel_.size()); }
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(logical_.size()) * geometry_.block_size_logical();
  }

  // Kernel block and in-block offset of a token; OutOfRange beyond capacity_tokens().
  StatusOr<KernelSlot> KernelSlotOfToken(int64_t token_index) const;

 private:
  BlockGeometry geometry_;
  std::vector<LogicalBlockId> logical_;
  std::vector<KernelBlockId> kernel_;
};

}  // namespace kvferry::kv
