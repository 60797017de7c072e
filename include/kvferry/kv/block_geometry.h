// BlockGeometry: the one mapping between the two id spaces (docs/kv_layout.md).
//
// With R = block_size_logical / block_size_kernel (must divide), logical block l owns the kernel
// blocks l*R + j for j in [0, R), in order. This is the ONLY place that converts a LogicalBlockId
// into KernelBlockIds; everything that addresses memory gets its kernel ids from here (directly,
// or through BlockTable in kv/block_pool.h).
//
// Consequence: a logical block's R kernel blocks are adjacent in every block-major region, so a
// logical block is one contiguous byte range of R * bytes_per_kernel_block bytes.
//
// Thread-safety: values; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::kv {

// A run of consecutive kernel block ids [first, first + size). Iterable; a value.
class KernelBlockRange {
 public:
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = KernelBlockId;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = KernelBlockId;
    constexpr Iterator() = default;
    constexpr explicit Iterator(int32_t v) : v_(v) {}
    constexpr KernelBlockId operator*() const { return KernelBlockId(v_); }
    constexpr Iterator& operator++() {
      ++v_;
      return *this;
    }
    constexpr Iterator operator++(int) {
      Iterator old = *this;
      ++v_;
      return old;
    }
    friend constexpr bool operator==(Iterator, Iterator) = default;

   private:
    int32_t v_ = 0;
  };

  constexpr KernelBlockRange() = default;
  constexpr KernelBlockRange(KernelBlockId first, int32_t size) : first_(first), size_(size) {}
  constexpr KernelBlockId first() const { return first_; }
  constexpr int32_t size() const { return size_; }
  // The j-th kernel block of the run; j in [0, size()).
  constexpr KernelBlockId operator[](int32_t j) const { return KernelBlockId(first_.value() + j); }
  constexpr Iterator begin() const { return Iterator(first_.value()); }
  constexpr Iterator end() const { return Iterator(first_.value() + size_); }
  friend constexpr bool operator==(KernelBlockRange, KernelBlockRange) = default;

 private:
  KernelBlockId first_{0};
  int32_t size_ = 0;
};

// Where one token of a sequence lives in kernel space.
struct KernelSlot {
  KernelBlockId block;
  int32_t token_in_block = 0;  // in [0, block_size_kernel)
  friend bool operator==(const KernelSlot&, const KernelSlot&) = default;
};

class BlockGeometry {
 public:
  // InvalidArgument when a size is not positive or block_size_kernel does not divide
  // block_size_logical (the message names both sizes).
  static StatusOr<BlockGeometry> Create(int32_t block_size_logical, int32_t block_size_kernel);

  int32_t block_size_logical() const { return block_size_logical_; }
  int32_t block_size_kernel() const { return block_size_kernel_; }
  // R: kernel blocks per logical block.
  int32_t kernel_blocks_per_logical() const { return kernel_blocks_per_logical_; }

  // The R kernel blocks of `logical` (value >= 0, checked; aborts): [l*R, l*R + R).
  KernelBlockRange KernelBlocksOf(LogicalBlockId logical) const;
  // The j-th kernel block of `logical`, j in [0, R) (checked; aborts): l*R + j.
  KernelBlockId KernelBlockOf(LogicalBlockId logical, int32_t j) const;
  // The logical block that owns `kernel`: k / R. Used to turn kernel-level failures back into
  // logical reports.
  LogicalBlockId LogicalBlockOwning(KernelBlockId kernel) const;

  // Expands a request's logical block table into its kernel block table (R entries each, order
  // preserved). `out` gets size logical.size() * R.
  std::vector<KernelBlockId> ExpandBlockTable(std::span<const LogicalBlockId> logical) const;
  void ExpandBlockTableInto(std::span<const LogicalBlockId> logical,
                            std::vector<KernelBlockId>* out) const;

  // Kernel block and offset of token `token_index` of a sequence whose logical block table is
  // `logical`. OutOfRange when the token is beyond the table's capacity or negative.
  StatusOr<KernelSlot> KernelSlotOfToken(std::span<const LogicalBlockId> logical,
                                         int64_t token_index) const;
  // Same, block only. OutOfRange as above.
  StatusOr<KernelBlockId> KernelBlockOfToken(std::span<const LogicalBlockId> logical,
                                             int64_t token_index) const;

  // Blocks needed to hold `num_tokens` tokens (ceil).
  int32_t LogicalBlocksFor(int64_t num_tokens) const;
  int32_t KernelBlocksFor(int64_t num_tokens) const;
  // Kernel blocks owned by `num_blocks_logical` logical blocks: num_blocks_logical * R.
  int32_t KernelBlocksOfLogicalCount(int32_t num_blocks_logical) const;

  friend bool operator==(const BlockGeometry&, const BlockGeometry&) = default;

 private:
  BlockGeometry(int32_t logical, int32_t kernel)
      : block_size_logical_(logical),
        block_size_kernel_(kernel),
        kernel_blocks_per_logical_(logical / kernel) {}

  int32_t block_size_logical_;
  int32_t block_size_kernel_;
  int32_t kernel_blocks_per_logical_;
};

}  // namespace kvferry::kv
