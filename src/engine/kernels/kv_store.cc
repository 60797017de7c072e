#include "engine/kernels/kv_store.h"

#include <span>

#include "kvferry/kv/dtype.h"

namespace kvferry::engine::kernels {

KvLayerView LayerView(kv::KvCache& cache, int32_t layer) {
  const kv::CacheSpec& spec = cache.spec();
  KvLayerView view;
  view.k = cache.key_region(layer).base;
  view.v = cache.value_region(layer).base;
  view.dtype = spec.dtype;
  view.layout = spec.layout;
  view.block_size_kernel = spec.block_size_kernel;
  view.num_kv_heads = spec.num_kv_heads;
  view.head_dim = spec.head_dim;
  return view;
}

KvLayerView MlaLayerView(kv::KvCache& cache, int32_t layer) {
  const kv::CacheSpec& spec = cache.spec();
  KvLayerView view;
  view.k = cache.region(layer).base;
  view.v = view.k;
  view.dtype = spec.dtype;
  view.layout = spec.layout;
  view.block_size_kernel = spec.block_size_kernel;
  view.num_kv_heads = spec.num_kv_heads;
  view.head_dim = spec.head_dim;
  return view;
}

void StoreRow(const KvLayerView& view, const kv::KernelBlockId* kernel_table, int32_t pos,
              const float* row) {
  const size_t bytes = kv::DTypeBytes(view.dtype);
  for (int32_t h = 0; h < view.num_kv_heads; ++h) {
    const size_t byte_off = static_cast<size_t>(view.PositionOffset(kernel_table, pos, h)) * bytes;
    kv::StoreAs(
        view.dtype,
        std::span<const float>(row + static_cast<int64_t>(h) * view.head_dim, view.head_dim),
        view.k + byte_off);
  }
}

void StoreKv(const KvLayerView& view, const kv::KernelBlockId* kernel_table, int32_t pos,
             const float* k_row, const float* v_row) {
  const size_t bytes = kv::DTypeBytes(view.dtype);
  for (int32_t h = 0; h < view.num_kv_heads; ++h) {
    const size_t byte_off = static_cast<size_t>(view.PositionOffset(kernel_table, pos, h)) * bytes;
    kv::StoreAs(
        view.dtype,
        std::span<const float>(k_row + static_cast<int64_t>(h) * view.head_dim, view.head_dim),
        view.k + byte_off);
    kv::StoreAs(
        view.dtype,
        std::span<const float>(v_row + static_cast<int64_t>(h) * view.head_dim, view.head_dim),
        view.v + byte_off);
  }
}

void LoadHead(const KvLayerView& view, const std::byte* region,
              const kv::KernelBlockId* kernel_table, int32_t pos, int32_t head, float* out) {
  const int64_t off = view.PositionOffset(kernel_table, pos, head);
  kv::LoadFrom(view.dtype, region + static_cast<size_t>(off) * kv::DTypeBytes(view.dtype),
               std::span<float>(out, view.head_dim));
}

const float* HeadInPlace(const KvLayerView& view, const std::byte* region,
                         const kv::KernelBlockId* kernel_table, int32_t pos, int32_t head) {
  return reinterpret_cast<const float*>(region) + view.PositionOffset(kernel_table, pos, head);
}

}  // namespace kvferry::engine::kernels
