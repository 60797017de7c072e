#include "kvferry/kv/attention_backend.h"

#include <algorithm>

namespace kvferry::kv {

bool KernelBlockSizeRule::Accepts(int32_t block_size_kernel) const {
  if (block_size_kernel <= 0 || value <= 0) return false;
  return kind == Kind::kExact ? block_size_kernel == value : block_size_kernel % value == 0;
}

bool AttentionBackend::SupportsKernelBlockSize(int32_t block_size_kernel) const {
  return std::any_of(supported_block_sizes_kernel.begin(), supported_block_sizes_kernel.end(),
                     [&](const KernelBlockSizeRule& r) { return r.Accepts(block_size_kernel); });
}

std::string AttentionBackend::DescribeSupportedSizes() const {
  std::string out;
  for (const KernelBlockSizeRule& r : supported_block_sizes_kernel) {
    if (!out.empty()) out += ", ";
    if (r.kind == KernelBlockSizeRule::Kind::kMultipleOf) out += "multiple of ";
    out += std::to_string(r.value);
  }
  return out;
}

const AttentionBackend& FlashAttentionBackend() {
  static const AttentionBackend* backend =
      new AttentionBackend{"flash",
                           {KernelBlockSizeRule::Exact(16), KernelBlockSizeRule::Exact(32),
                            KernelBlockSizeRule::Exact(64)}};
  return *backend;
}

const AttentionBackend& PagedAttentionBackend() {
  static const AttentionBackend* backend =
      new AttentionBackend{"paged", {KernelBlockSizeRule::MultipleOf(16)}};
  return *backend;
}

std::vector<std::string_view> AttentionBackendNames() {
  return {FlashAttentionBackend().name, PagedAttentionBackend().name};
}

StatusOr<const AttentionBackend*> FindAttentionBackend(std::string_view name) {
  for (const AttentionBackend* b : {&FlashAttentionBackend(), &PagedAttentionBackend()}) {
    if (b->name == name) return b;
  }
  std::string known;
  for (std::string_view n : AttentionBackendNames()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  return NotFoundError("unknown attention backend '" + std::string(name) + "' (known: " + known +
                       ")");
}

StatusOr<int32_t> SelectKernelBlockSize(int32_t block_size_logical,
                                        const AttentionBackend& backend) {
  if (block_size_logical <= 0) {
    return InvalidArgumentError("block_size_logical must be positive, got " +
                                std::to_string(block_size_logical));
  }
  if (backend.SupportsKernelBlockSize(block_size_logical)) return block_size_logical;
  int32_t best = 0;
  for (const KernelBlockSizeRule& r : backend.supported_block_sizes_kernel) {
    if (r.kind == KernelBlockSizeRule::Kind::kExact && r.value > 0 &&
        block_size_logical % r.value == 0) {
      best = std::max(best, r.value);
    }
  }
  if (best > 0) return best;
  return InvalidArgumentError("block size " + std::to_string(block_size_logical) +
                              " is not supported by attention backend '" + backend.name +
                              "' (kernel block sizes: " + backend.DescribeSupportedSizes() +
                              ") and no supported size divides it");
}

}  // namespace kvferry::kv
