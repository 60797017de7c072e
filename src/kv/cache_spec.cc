#include "kvferry/kv/cache_spec.h"

#include <cstdlib>
#include <cstring>
#include <limits>

namespace kvferry::kv {
namespace {

constexpr size_t kAlignment = 64;

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

Status Positive(std::string_view field, int32_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError("cache spec: " + std::string(field) + " must be positive, got " +
                              std::to_string(value));
}

}  // namespace

size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

std::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kNHD:
      return "NHD";
    case Layout::kHND:
      return "HND";
    case Layout::kVllmCpu:
      return "VLLM_CPU";
    case Layout::kVllmCpuAmx:
      return "VLLM_CPU_AMX";
  }
  return "?";
}

bool IsVllmCpuPage(Layout layout) {
  return layout == Layout::kVllmCpu || layout == Layout::kVllmCpuAmx;
}

StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return InvalidArgumentError("unknown dtype '" + std::string(name) + "' (known: f32, f16, bf16)");
}

StatusOr<Layout> ParseLayout(std::string_view name) {
  if (name == "NHD" || name == "nhd") return Layout::kNHD;
  if (name == "HND" || name == "hnd") return Layout::kHND;
  if (name == "VLLM_CPU" || name == "vllm_cpu") return Layout::kVllmCpu;
  if (name == "VLLM_CPU_AMX" || name == "vllm_cpu_amx") return Layout::kVllmCpuAmx;
  return InvalidArgumentError("unknown layout '" + std::string(name) +
                              "' (known: NHD, HND, VLLM_CPU, VLLM_CPU_AMX)");
}

Status CacheSpec::Validate() const {
  KVF_RETURN_IF_ERROR(Positive("num_layers", num_layers));
  KVF_RETURN_IF_ERROR(Positive("num_kv_heads", num_kv_heads));
  KVF_RETURN_IF_ERROR(Positive("head_dim", head_dim));
  KVF_RETURN_IF_ERROR(Positive("block_size_kernel", block_size_kernel));
  KVF_RETURN_IF_ERROR(Positive("num_blocks_kernel", num_blocks_kernel));
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return InvalidArgumentError("cache spec: unknown dtype");
  }
  if (layout != Layout::kNHD && layout != Layout::kHND && !IsVllmCpuPage(layout)) {
    return InvalidArgumentError("cache spec: unknown layout");
  }
  if (IsVllmCpuPage(layout) && kind != AttentionKind::kStandard) {
    return InvalidArgumentError("cache spec: layout " + std::string(LayoutName(layout)) +
                                " holds standard attention only");
  }
  KVF_RETURN_IF_ERROR(ValidateAmxTiles());
  if (kind != AttentionKind::kStandard && kind != AttentionKind::kMLA) {
    return InvalidArgumentError("cache spec: unknown attention kind");
  }
  if (kind == AttentionKind::kMLA && num_kv_heads != 1) {
    return InvalidArgumentError("cache spec: MLA needs num_kv_heads 1, got " +
                                std::to_string(num_kv_heads));
  }
  if (mla_rope_dim < 0 || mla_rope_dim >= head_dim ||
      (kind != AttentionKind::kMLA && mla_rope_dim != 0)) {
    return InvalidArgumentError("cache spec: mla_rope_dim " + std::to_string(mla_rope_dim) +
                                " must be 0 (standard attention) or below head_dim (MLA)");
  }
  // Keep every byte count well inside size_t and element offsets inside int64.
  const double total = static_cast<double>(num_regions()) * num_blocks_kernel *
                       static_cast<double>(bytes_per_kernel_block());
  if (total > static_cast<double>(int64_t{1} << 46)) {
    return InvalidArgumentError("cache spec: " + std::to_string(total) + " bytes is too large");
  }
  return Status::Ok();
}

// VLLM_CPU_AMX packs K in 16-token tiles of dim pairs and V in 16-dim tiles of token pairs,
// 32-bit pairs of 16-bit elements.
Status CacheSpec::ValidateAmxTiles() const {
  if (layout != Layout::kVllmCpuAmx) return Status::Ok();
  if (DTypeBytes(dtype) != 2) {
    return InvalidArgumentError("cache spec: layout VLLM_CPU_AMX holds 16-bit elements, not " +
                                std::string(DTypeName(dtype)));
  }
  if (block_size_kernel % 16 != 0 || head_dim % 16 != 0) {
    return InvalidArgumentError(
        "cache spec: layout VLLM_CPU_AMX needs block_size_kernel and "
        "head_dim multiples of 16, got " +
        std::to_string(block_size_kernel) + " and " + std::to_string(head_dim));
  }
  return Status::Ok();
}

int32_t CacheSpec::num_regions() const {
  const bool one_per_layer = kind == AttentionKind::kMLA || IsVllmCpuPage(layout);
  return one_per_layer ? num_layers : 2 * num_layers;
}

size_t CacheSpec::bytes_per_token_slot() const {
  const size_t parts = IsVllmCpuPage(layout) ? 2 : 1;
  return parts * num_kv_heads * head_dim * DTypeBytes(dtype);
}

size_t CacheSpec::bytes_per_kernel_block() const {
  return static_cast<size_t>(block_size_kernel) * bytes_per_token_slot();
}

size_t CacheSpec::region_bytes() const {
  return static_cast<size_t>(num_blocks_kernel) * bytes_per_kernel_block();
}

std::vector<int64_t> CacheSpec::RegionShape() const {
  if (layout == Layout::kNHD) return {num_blocks_kernel, block_size_kernel, num_kv_heads, head_dim};
  const int64_t row = IsVllmCpuPage(layout) ? 2 * head_dim : head_dim;
  return {num_blocks_kernel, num_kv_heads, block_size_kernel, row};
}

std::vector<int64_t> CacheSpec::RegionStrides() const {
  const int64_t d = IsVllmCpuPage(layout) ? 2 * head_dim : head_dim;
  const int64_t block = static_cast<int64_t>(block_size_kernel) * num_kv_heads * d;
  if (layout == Layout::kNHD) return {block, num_kv_heads * d, d, 1};
  return {block, block_size_kernel * d, d, 1};
}

size_t CacheSpec::ElementOffset(KernelBlockId kernel_block, int32_t token_in_block,
                                int32_t head) const {
  const size_t b = static_cast<size_t>(kernel_block.value());
  const size_t t = static_cast<size_t>(token_in_block);
  const size_t h = static_cast<size_t>(head);
  const size_t bs = static_cast<size_t>(block_size_kernel);
  const size_t nh = static_cast<size_t>(num_kv_heads);
  const size_t d = static_cast<size_t>(head_dim);
  if (layout == Layout::kNHD) return ((b * bs + t) * nh + h) * d;
  return ((b * nh + h) * bs + t) * d;
}

CacheSpec::RowLocation CacheSpec::Row(int32_t layer, Part part, KernelBlockId kernel_block,
                                      int32_t token_in_block, int32_t head) const {
  const size_t p = static_cast<size_t>(part);
  if (!IsVllmCpuPage(layout)) {
    const int32_t region =
        kind == AttentionKind::kMLA ? layer : 2 * layer + static_cast<int32_t>(p);
    return {region, ElementOffset(kernel_block, token_in_block, head)};
  }
  // One (block, head) page: the K tile, then the V tile (N tokens x D dims each).
  const size_t n = static_cast<size_t>(block_size_kernel);
  const size_t d = static_cast<size_t>(head_dim);
  const size_t page = (static_cast<size_t>(kernel_block.value()) * num_kv_heads + head) * 2 * n * d;
  const size_t t = static_cast<size_t>(token_in_block);
  if (layout == Layout::kVllmCpu) {  // K [dim][token], V [token][dim]
    if (part == Part::kKey) return {layer, page + t, n};
    return {layer, page + n * d + t * d};
  }
  // VLLM_CPU_AMX: K [token / 16][dim / 2][token % 16][dim % 2],
  //               V [dim / 16][token / 2][dim % 16][token % 2].
  if (part == Part::kKey) return {layer, page + (t / 16) * 16 * d + (t % 16) * 2, 1, 2, 32};
  return {layer, page + n * d + (t / 2) * 32 + t % 2, 2, 16, 16 * n};
}

CacheSpec::ByteRange CacheSpec::KernelBlockBytes(KernelBlockId first, int32_t count) const {
  const uint64_t bpkb = bytes_per_kernel_block();
  return {static_cast<uint64_t>(first.value()) * bpkb, static_cast<uint64_t>(count) * bpkb};
}

std::vector<CacheSpec::ByteRange> CacheSpec::HeadSliceBytes(KernelBlockId first, int32_t count,
                                                            int32_t first_head,
                                                            int32_t num_heads) const {
  if (first_head == 0 && num_heads == num_kv_heads) return {KernelBlockBytes(first, count)};
  const uint64_t es = DTypeBytes(dtype);
  const uint64_t row = static_cast<uint64_t>(head_dim) * es;
  std::vector<ByteRange> out;
  for (int32_t i = 0; i < count; ++i) {
    const KernelBlockId b(first.value() + i);
    if (IsVllmCpuPage(layout)) {  // a head's page is K then V, 2 * tokens * row bytes
      const uint64_t page = 2 * static_cast<uint64_t>(block_size_kernel) * row;
      out.push_back({(static_cast<uint64_t>(b.value()) * num_kv_heads + first_head) * page,
                     static_cast<uint64_t>(num_heads) * page});
      continue;
    }
    if (layout == Layout::kHND) {
      out.push_back({ElementOffset(b, 0, first_head) * es,
                     static_cast<uint64_t>(num_heads) * block_size_kernel * row});
      continue;
    }
    for (int32_t t = 0; t < block_size_kernel; ++t) {
      out.push_back({ElementOffset(b, t, first_head) * es, num_heads * row});
    }
  }
  return out;
}

KvCache::KvCache(const CacheSpec& spec) : spec_(spec) {}

KvCache::~KvCache() {
  if (source_) {
    for (const RegionView& r : regions_) source_->release(r.base);
  }
  std::free(memory_);
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Allocate(const CacheSpec& spec,
                                                     std::optional<CacheMemory> memory) {
  KVF_RETURN_IF_ERROR(spec.Validate());
  std::unique_ptr<KvCache> cache(new KvCache(spec));
  cache->regions_.reserve(spec.num_regions());
  if (memory) {
    if (!memory->allocate || !memory->release) {
      return InvalidArgumentError("KvCache: CacheMemory needs both allocate and release");
    }
    KVF_RETURN_IF_ERROR(cache->AllocateFrom(*memory));
    return cache;
  }
  const size_t region_stride = RoundUp(spec.region_bytes(), kAlignment);
  const size_t total = region_stride * static_cast<size_t>(spec.num_regions());
  cache->memory_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, total));
  if (cache->memory_ == nullptr) {
    return ResourceExhaustedError("KvCache: cannot allocate " + std::to_string(total) + " bytes");
  }
  std::memset(cache->memory_, 0, total);
  for (int32_t r = 0; r < spec.num_regions(); ++r) {
    cache->regions_.push_back(RegionView{cache->memory_ + r * region_stride, spec.region_bytes()});
  }
  return cache;
}

// Regions allocated so far are given back by the destructor if a later one fails.
StatusOr<std::unique_ptr<KvCache>> KvCache::Borrow(const CacheSpec& spec,
                                                   std::vector<RegionView> regions) {
  KVF_RETURN_IF_ERROR(spec.Validate());
  if (static_cast<int32_t>(regions.size()) != spec.num_regions()) {
    return InvalidArgumentError("KvCache: " + std::to_string(regions.size()) +
                                " regions borrowed, the spec has " +
                                std::to_string(spec.num_regions()));
  }
  for (size_t r = 0; r < regions.size(); ++r) {
    if (regions[r].base == nullptr || regions[r].size_bytes < spec.region_bytes()) {
      return InvalidArgumentError("KvCache: borrowed region " + std::to_string(r) + " holds " +
                                  std::to_string(regions[r].size_bytes) +
                                  " bytes, the spec needs " + std::to_string(spec.region_bytes()));
    }
    if (reinterpret_cast<uintptr_t>(regions[r].base) % kAlignment != 0) {
      return InvalidArgumentError("KvCache: borrowed region " + std::to_string(r) +
                                  " is not 64-byte aligned");
    }
    regions[r].size_bytes = spec.region_bytes();
  }
  std::unique_ptr<KvCache> cache(new KvCache(spec));
  cache->regions_ = std::move(regions);
  return cache;
}

Status KvCache::AllocateFrom(const CacheMemory& memory) {
  source_ = memory;
  for (int32_t r = 0; r < spec_.num_regions(); ++r) {
    KVF_ASSIGN_OR_RETURN(std::byte * base, memory.allocate(spec_.region_bytes()));
    if (base == nullptr) return InternalError("KvCache: CacheMemory allocated a null region");
    regions_.push_back(RegionView{base, spec_.region_bytes()});
    if (reinterpret_cast<uintptr_t>(base) % kAlignment != 0) {
      return InternalError("KvCache: CacheMemory returned a region not 64-byte aligned");
    }
  }
  return Status::Ok();
}

StatusOr<CacheSpec> GeometryOf(const KvCache& cache) {
  const CacheSpec& declared = cache.spec();
  KVF_RETURN_IF_ERROR(declared.Validate());
  if (cache.num_regions() != declared.num_regions()) {
    return InvalidArgumentError("GeometryOf: " + std::to_string(cache.num_regions()) +
                                " regions allocated, spec needs " +
                                std::to_string(declared.num_regions()));
  }
  const size_t region_bytes = cache.region(0).size_bytes;
  const size_t per_block = declared.bytes_per_kernel_block();
  if (region_bytes == 0 || region_bytes % per_block != 0) {
    return InvalidArgumentError("GeometryOf: region of " + std::to_string(region_bytes) +
                                " bytes is not a whole number of " + std::to_string(per_block) +
                                "-byte kernel blocks");
  }
  for (int32_t r = 0; r < cache.num_regions(); ++r) {
    const RegionView v = cache.region(r);
    if (v.base == nullptr || v.size_bytes != region_bytes) {
      return InvalidArgumentError("GeometryOf: region " + std::to_string(r) + " has " +
                                  std::to_string(v.size_bytes) + " bytes, region 0 has " +
                                  std::to_string(region_bytes));
    }
    if (reinterpret_cast<uintptr_t>(v.base) % kAlignment != 0) {
      return InvalidArgumentError("GeometryOf: region " + std::to_string(r) +
                                  " is not 64-byte aligned");
    }
  }
  CacheSpec spec = declared;
  const size_t blocks = region_bytes / per_block;
  if (blocks > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgumentError("GeometryOf: too many kernel blocks");
  }
  spec.num_blocks_kernel = static_cast<int32_t>(blocks);
  return spec;
}

}  // namespace kvferry::kv
