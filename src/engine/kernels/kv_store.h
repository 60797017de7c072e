// KV cache access for the kernels (internal): where a token's K/V lives in a layer's regions,
// storing f32 rows converted to the cache dtype, and loading them back as f32.
//
// Addressing is by KERNEL block (kv::KernelBlockId from the request's kv::BlockTable): position
// p of a sequence lives in kernel block table[p / block_size_kernel] at p % block_size_kernel.
// Element offset of (block b, token t, head h) in a region:
//   NHD: ((b * block_size_kernel + t) * num_kv_heads + h) * head_dim
//   HND: ((b * num_kv_heads + h) * block_size_kernel + t) * head_dim
// Conversions are kv/dtype.h's (round to nearest even; loading widens exactly): a stored value
// is a function of the f32 value only, so the cache contents do not depend on the geometry.
//
// Thread-safety: views are values; concurrent stores must touch different tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::engine::kernels {

// One layer's K and V regions (MLA: one region, k == v).
struct KvLayerView {
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  kv::DType dtype = kv::DType::kF32;
  kv::Layout layout = kv::Layout::kNHD;
  int32_t block_size_kernel = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  // Element offset of (kernel block, token in block, head, dim 0) within a region.
  int64_t ElementOffset(kv::KernelBlockId block, int32_t token_in_block, int32_t head) const {
    const int64_t b = block.value();
    if (layout == kv::Layout::kNHD) {
      return ((b * block_size_kernel + token_in_block) * num_kv_heads + head) * head_dim;
    }
    return ((b * num_kv_heads + head) * block_size_kernel + token_in_block) * head_dim;
  }

  // Element offset of (sequence position `pos`, head, dim 0), through the sequence's kernel
  // block table.
  int64_t PositionOffset(const kv::KernelBlockId* kernel_table, int32_t pos, int32_t head) const {
    return ElementOffset(kernel_table[pos / block_size_kernel], pos % block_size_kernel, head);
  }
};

// The view of layer `layer` of `cache` (standard attention).
KvLayerView LayerView(kv::KvCache& cache, int32_t layer);
// The view of layer `layer` of an MLA cache: k = v = the layer's one region, one head of
// [latent | rope key].
KvLayerView MlaLayerView(kv::KvCache& cache, int32_t layer);

// Stores the row ([num_kv_heads][head_dim] floats) of position `pos` into view.k only (MLA).
void StoreRow(const KvLayerView& view, const kv::KernelBlockId* kernel_table, int32_t pos,
              const float* row);

// Stores the K and V rows ([num_kv_heads][head_dim] floats each) of sequence position `pos`.
void StoreKv(const KvLayerView& view, const kv::KernelBlockId* kernel_table, int32_t pos,
             const float* k_row, const float* v_row);

// Loads head `head` of K (or V) at position `pos` as head_dim floats into `out`.
void LoadHead(const KvLayerView& view, const std::byte* region,
              const kv::KernelBlockId* kernel_table, int32_t pos, int32_t head, float* out);

// Where head `head` of K (or V) at position `pos` starts in an f32 cache (view.dtype == kF32):
// its head_dim floats, read in place (the values LoadHead copies).
const float* HeadInPlace(const KvLayerView& view, const std::byte* region,
                         const kv::KernelBlockId* kernel_table, int32_t pos, int32_t head);

}  // namespace kvferry::engine::kernels
