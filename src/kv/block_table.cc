#include "kvferry/kv/block_table.h"

#include "kvferry/common/check.h"

namespace kvferry::kv {

void BlockTable::Append(LogicalBlockId id) {
  KVF_CHECK(id.value() >= 0);
  logical_.push_back(id);
  for (KernelBlockId k : geometry_.KernelBlocksOf(id)) kernel_.push_back(k);
}

void BlockTable::Append(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) Append(id);
}

void BlockTable::Truncate(int32_t num_blocks_logical) {
  KVF_CHECK(num_blocks_logical >= 0 && num_blocks_logical <= this->num_blocks_logical());
  logical_.resize(num_blocks_logical);
  kernel_.resize(geometry_.KernelBlocksOfLogicalCount(num_blocks_logical));
}

StatusOr<KernelSlot> BlockTable::KernelSlotOfToken(int64_t token_index) const {
  return geometry_.KernelSlotOfToken(logical_, token_index);
}

}  // namespace kvferry::kv
