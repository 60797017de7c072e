// CacheSpec: the shape of one instance's KV cache, and the regions it is made of.
//
// A cache is a set of *regions*, each one contiguous, block-major memory area:
//   standard attention: 2 regions per layer, K then V, region index = 2*layer + {0 for K, 1 for V}
//   MLA:                1 region per layer (the latent), region index = layer
//   vLLM's CPU attention (layouts VLLM_CPU, VLLM_CPU_AMX): 1 region per layer holding K and V,
//   region = layer
// Within a region, kernel block b occupies bytes [b*bytes_per_kernel_block, (b+1)*...), laid out
//   NHD: [token][head][dim]   (MLA: [token][latent | rope key], head count 1,
//                              head_dim = latent dim + mla_rope_dim)
//   HND: [head][token][dim]
//   VLLM_CPU: [head][K tile: dim x token (K transposed)][V tile: token x dim] — what vLLM's CPU
//             backend (CPU_ATTN, vllm-cpu 0.32) writes into its per-layer tensor
//             [num_blocks, num_kv_heads, block_size, 2 * head_dim]; standard attention only
//   VLLM_CPU_AMX: the same tensor and pages as written by vLLM's AMX ISA (bf16 on CPUs with AMX
//             tiles, block sizes a multiple of 32), whose tiles are packed for AMX instead:
//               K tile: [token / 16][dim / 2][token % 16][dim % 2]
//               V tile: [dim / 16][token / 2][dim % 16][token % 2]
//             16-bit dtypes only, block_size_kernel and head_dim multiples of 16. Same shape,
//             other bytes: a cache registered as VLLM_CPU when vLLM wrote AMX tiles would move
//             the right bytes for whole blocks and wrong ones for every re-layout.
// so a logical block's R kernel blocks are one contiguous byte range in every region. Row()
// finds one (layer, K|V, token, head) row in any layout; ElementOffset is for NHD/HND/MLA.
//
// GeometryOf(allocated memory) derives the spec from what was actually allocated: the connector
// uses it, never the user's config (the seed's lesson).
//
// Thread-safety: values; KvCache is a plain owner of memory, externally synchronized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::kv {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum class Layout : uint8_t { kNHD = 0, kHND = 1, kVllmCpu = 2, kVllmCpuAmx = 3 };
enum class AttentionKind : uint8_t { kStandard = 0, kMLA = 1 };

size_t DTypeBytes(DType dtype);
std::string_view DTypeName(DType dtype);     // "f32" | "f16" | "bf16"
std::string_view LayoutName(Layout layout);  // "NHD" | "HND" | "VLLM_CPU" | "VLLM_CPU_AMX"
// vLLM's CPU page (VLLM_CPU or VLLM_CPU_AMX): one region per layer, per (block, head) a K tile
// then a V tile.
bool IsVllmCpuPage(Layout layout);
StatusOr<DType> ParseDType(std::string_view name);
StatusOr<Layout> ParseLayout(std::string_view name);

struct CacheSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // 1 for MLA
  int32_t head_dim = 0;      // latent dim for MLA (all of a token's row: latent + rope key)
  // MLA: how many of a row's head_dim values (the last ones) are the decoupled rope key; the
  // rest is the compressed latent. 0 for standard attention (and for an MLA row without one).
  int32_t mla_rope_dim = 0;
  DType dtype = DType::kF32;
  AttentionKind kind = AttentionKind::kStandard;
  Layout layout = Layout::kNHD;
  int32_t block_size_kernel = 0;  // tokens per kernel block
  int32_t num_blocks_kernel = 0;  // kernel blocks per region

  // InvalidArgument naming the field when something is zero/negative or inconsistent.
  Status Validate() const;

  int32_t num_regions() const;  // 2*layers (standard NHD/HND), layers (MLA, VLLM_CPU*)
  // The bytes of one token in one region: heads * head_dim * dtype bytes (VLLM_CPU*: twice
  // that, K and V).
  size_t bytes_per_token_slot() const;
  size_t bytes_per_kernel_block() const;  // block_size_kernel * bytes_per_token_slot()
  size_t region_bytes() const;            // num_blocks_kernel * bytes_per_kernel_block()

  // Element shape and strides (in elements) of one region, outermost first:
  //   NHD: {num_blocks_kernel, block_size_kernel, num_kv_heads, head_dim}
  //   HND: {num_blocks_kernel, num_kv_heads, block_size_kernel, head_dim}
  //   VLLM_CPU*: {num_blocks_kernel, num_kv_heads, block_size_kernel, 2 * head_dim} (vLLM's
  //             tensor shape; the tiles inside a (block, head) are packed, see above)
  std::vector<int64_t> RegionShape() const;
  std::vector<int64_t> RegionStrides() const;

  // Element offset, within a region, of (kernel block, token in block, head, dim 0), for NHD,
  // HND and MLA (where a row is contiguous; not VLLM_CPU*: use Row). Memory is addressed by
  // KERNEL ids only: a LogicalBlockId (or a bare int) does not compile here.
  size_t ElementOffset(KernelBlockId kernel_block, int32_t token_in_block, int32_t head) const;

  // Which part of a layer's KV a row belongs to (MLA has one: its latent row, kKey).
  enum class Part : uint8_t { kKey = 0, kValue = 1 };
  int32_t num_parts() const { return kind == AttentionKind::kMLA ? 1 : 2; }
  // Where the head_dim elements of one row live: the region, and element d at
  //   offset + (d / group) * group_stride + (d % group) * stride
  // elements into it. NHD/HND/MLA: stride 1, one group (a contiguous row); VLLM_CPU: K's stride
  // is block_size_kernel (the tile is transposed), V contiguous; VLLM_CPU_AMX: K in groups of 2
  // (dim pairs, 32 elements apart), V in groups of 16 with stride 2.
  struct RowLocation {
    int32_t region = 0;
    size_t offset = 0;
    size_t stride = 1;
    size_t group = SIZE_MAX;  // elements per group (SIZE_MAX: the whole row is one group)
    size_t group_stride = 0;  // elements between the starts of consecutive groups
    size_t ElementAt(size_t d) const {
      return offset + (d / group) * group_stride + (d % group) * stride;
    }
    bool contiguous() const { return stride == 1 && group == SIZE_MAX; }
  };
  RowLocation Row(int32_t layer, Part part, KernelBlockId kernel_block, int32_t token_in_block,
                  int32_t head) const;

  // The bytes, within one region, of `count` kernel blocks from `first` on.
  struct ByteRange {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  ByteRange KernelBlockBytes(KernelBlockId first, int32_t count = 1) const;
  // The bytes, within one region, of heads [first_head, first_head + num_heads) of `count` kernel
  // blocks from `first` (a tensor-parallel rank's share), in element order (block, then HND:
  // head, token; NHD: token, head), each range as long as the layout allows: one range for the
  // whole run when the heads are all of them, else one per block in HND and VLLM_CPU (a head
  // slice of a block is contiguous) and one per (block, token) in NHD (it is strided).
  std::vector<ByteRange> HeadSliceBytes(KernelBlockId first, int32_t count, int32_t first_head,
                                        int32_t num_heads) const;

  friend bool operator==(const CacheSpec&, const CacheSpec&) = default;

 private:
  Status ValidateAmxTiles() const;
};

// One region of allocated memory.
struct RegionView {
  std::byte* base = nullptr;
  size_t size_bytes = 0;
};

// Where a cache's regions come from when not from the heap: the KV connector's transfer agent,
// whose memory a peer on the same host maps, so a pull from this cache is one memcpy
// (ConnectorWorker::CacheMemoryFor). One `allocate` per region.
struct CacheMemory {
  // At least `bytes` bytes, zeroed, 64-byte aligned. An error fails the cache's allocation.
  std::function<StatusOr<std::byte*>(size_t bytes)> allocate;
  // Gives back what `allocate` returned; called once per region, by ~KvCache.
  std::function<void(std::byte*)> release;
};

// A cache's regions: allocated (Allocate: owned, zero-initialised, 64-byte aligned) or borrowed.
// Not copyable (its regions' addresses are registered with transports); movable only before
// registration — callers keep it in a unique_ptr.
class KvCache {
 public:
  // From the heap, one allocation for every region; with `memory`, one `allocate` per region.
  static StatusOr<std::unique_ptr<KvCache>> Allocate(const CacheSpec& spec,
                                                     std::optional<CacheMemory> memory = {});
  // A view of memory someone else allocated and keeps (another engine's KV tensors, e.g.
  // vLLM's, that the connector is to register): one region per entry of `regions`, in the
  // spec's region order, each 64-byte aligned and at least spec.region_bytes() long. Nothing
  // is zeroed or freed; the memory must outlive the cache. InvalidArgument when the count, a
  // size or an alignment is wrong.
  static StatusOr<std::unique_ptr<KvCache>> Borrow(const CacheSpec& spec,
                                                   std::vector<RegionView> regions);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const CacheSpec& spec() const { return spec_; }
  int32_t num_regions() const { return static_cast<int32_t>(regions_.size()); }
  RegionView region(int32_t index) const { return regions_[index]; }
  // Standard attention only: the K / V region of a layer.
  RegionView key_region(int32_t layer) const { return regions_[2 * layer]; }
  RegionView value_region(int32_t layer) const { return regions_[2 * layer + 1]; }

 private:
  explicit KvCache(const CacheSpec& spec);
  Status AllocateFrom(const CacheMemory& memory);
  CacheSpec spec_;
  std::vector<RegionView> regions_;
  std::byte* memory_ = nullptr;        // the heap allocation, when no CacheMemory was given
  std::optional<CacheMemory> source_;  // else where each region came from
};

// Derives the geometry from what was allocated: regions' sizes must agree with each other and
// with `layers/heads/head_dim/dtype/kind/layout` as declared by the model; the kernel block size
// and block count are read off the allocation. Returns InvalidArgument when they do not agree.
StatusOr<CacheSpec> GeometryOf(const KvCache& cache);

}  // namespace kvferry::kv
