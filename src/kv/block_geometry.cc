#include "kvferry/kv/block_geometry.h"

#include <string>

#include "kvferry/common/check.h"

namespace kvferry::kv {

StatusOr<BlockGeometry> BlockGeometry::Create(int32_t block_size_logical,
                                              int32_t block_size_kernel) {
  if (block_size_logical <= 0) {
    return InvalidArgumentError("block_size_logical must be positive, got " +
                                std::to_string(block_size_logical));
  }
  if (block_size_kernel <= 0) {
    return InvalidArgumentError("block_size_kernel must be positive, got " +
                                std::to_string(block_size_kernel));
  }
  if (block_size_logical % block_size_kernel != 0) {
    return InvalidArgumentError("block_size_kernel " + std::to_string(block_size_kernel) +
                                " does not divide block_size_logical " +
                                std::to_string(block_size_logical));
  }
  return BlockGeometry(block_size_logical, block_size_kernel);
}

KernelBlockRange BlockGeometry::KernelBlocksOf(LogicalBlockId logical) const {
  KVF_CHECK(logical.value() >= 0);
  return KernelBlockRange(KernelBlockId(logical.value() * kernel_blocks_per_logical_),
                          kernel_blocks_per_logical_);
}

KernelBlockId BlockGeometry::KernelBlockOf(LogicalBlockId logical, int32_t j) const {
  KVF_CHECK(logical.value() >= 0);
  KVF_CHECK(j >= 0 && j < kernel_blocks_per_logical_);
  return KernelBlockId(logical.value() * kernel_blocks_per_logical_ + j);
}

LogicalBlockId BlockGeometry::LogicalBlockOwning(KernelBlockId kernel) const {
  KVF_CHECK(kernel.value() >= 0);
  return LogicalBlockId(kernel.value() / kernel_blocks_per_logical_);
}

std::vector<KernelBlockId> BlockGeometry::ExpandBlockTable(
    std::span<const LogicalBlockId> logical) const {
  std::vector<KernelBlockId> out;
  ExpandBlockTableInto(logical, &out);
  return out;
}

void BlockGeometry::ExpandBlockTableInto(std::span<const LogicalBlockId> logical,
                                         std::vector<KernelBlockId>* out) const {
  out->clear();
  out->reserve(logical.size() * kernel_blocks_per_logical_);
  for (LogicalBlockId l : logical) {
    for (KernelBlockId k : KernelBlocksOf(l)) out->push_back(k);
  }
}

StatusOr<KernelSlot> BlockGeometry::KernelSlotOfToken(std::span<const LogicalBlockId> logical,
                                                      int64_t token_index) const {
  const int64_t capacity = static_cast<int64_t>(logical.size()) * block_size_logical_;
  if (token_index < 0 || token_index >= capacity) {
    return OutOfRangeError("token " + std::to_string(token_index) + " outside block table of " +
                           std::to_string(logical.size()) + " logical blocks (" +
                           std::to_string(capacity) + " tokens)");
  }
  const LogicalBlockId l = logical[token_index / block_size_logical_];
  const int32_t in_logical = static_cast<int32_t>(token_index % block_size_logical_);
  return KernelSlot{KernelBlockOf(l, in_logical / block_size_kernel_),
                    in_logical % block_size_kernel_};
}

StatusOr<KernelBlockId> BlockGeometry::KernelBlockOfToken(std::span<const LogicalBlockId> logical,
                                                          int64_t token_index) const {
  KVF_ASSIGN_OR_RETURN(KernelSlot slot, KernelSlotOfToken(logical, token_index));
  return slot.block;
}

int32_t BlockGeometry::LogicalBlocksFor(int64_t num_tokens) const {
  KVF_CHECK(num_tokens >= 0);
  return static_cast<int32_t>((num_tokens + block_size_logical_ - 1) / block_size_logical_);
}

int32_t BlockGeometry::KernelBlocksFor(int64_t num_tokens) const {
  KVF_CHECK(num_tokens >= 0);
  return static_cast<int32_t>((num_tokens + block_size_kernel_ - 1) / block_size_kernel_);
}

int32_t BlockGeometry::KernelBlocksOfLogicalCount(int32_t num_blocks_logical) const {
  KVF_CHECK(num_blocks_logical >= 0);
  return num_blocks_logical * kernel_blocks_per_logical_;
}

}  // namespace kvferry::kv
