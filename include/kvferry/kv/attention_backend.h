// Attention backends and the kernel block sizes they support (docs/kv_layout.md, "Choosing the
// kernel block size").
//
// A backend declares which kernel block sizes (tokens per page of the KV tensor) its kernels
// accept: exact sizes ("16, 32, 64") and/or "any multiple of n". SelectKernelBlockSize() turns
// the user's logical block size (--block-size) into the kernel block size the cache is laid out
// in. Built-ins:
//   "flash"  exact 16, 32, 64        (--block-size 128 gives kernel 64, R = 2, as in the seed)
//   "paged"  any multiple of 16
//
// Thread-safety: the built-in backends are immutable statics; everything here is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::kv {

// One rule of supported kernel block sizes.
struct KernelBlockSizeRule {
  enum class Kind : uint8_t { kExact, kMultipleOf };
  Kind kind = Kind::kExact;
  int32_t value = 0;  // the exact size, or n of "multiple of n"; > 0

  static KernelBlockSizeRule Exact(int32_t size) { return {Kind::kExact, size}; }
  static KernelBlockSizeRule MultipleOf(int32_t n) { return {Kind::kMultipleOf, n}; }
  bool Accepts(int32_t block_size_kernel) const;
};

struct AttentionBackend {
  std::string name;
  std::vector<KernelBlockSizeRule> supported_block_sizes_kernel;

  bool SupportsKernelBlockSize(int32_t block_size_kernel) const;
  // Human-readable, e.g. "16, 32, 64" or "multiple of 16".
  std::string DescribeSupportedSizes() const;
};

const AttentionBackend& FlashAttentionBackend();
const AttentionBackend& PagedAttentionBackend();

// Names of the built-in backends, in a stable order ("flash", "paged").
std::vector<std::string_view> AttentionBackendNames();
// NotFound listing the known names when `name` is not a built-in.
StatusOr<const AttentionBackend*> FindAttentionBackend(std::string_view name);

// The kernel block size for a requested logical block size: the logical size itself if the
// backend supports it, else the largest supported exact size that divides it, else
// InvalidArgument naming the logical size and the backend (with its supported sizes).
StatusOr<int32_t> SelectKernelBlockSize(int32_t block_size_logical,
                                        const AttentionBackend& backend);

}  // namespace kvferry::kv
