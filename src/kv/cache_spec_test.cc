#include "kvferry/kv/cache_spec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <vector>

#include "kvferry/kv/attention_backend.h"
#include "kvferry/kv/block_geometry.h"

namespace kvferry::kv {
namespace {

CacheSpec Spec(Layout layout) {
  CacheSpec s;
  s.num_layers = 3;
  s.num_kv_heads = 4;
  s.head_dim = 8;
  s.dtype = DType::kBF16;
  s.layout = layout;
  s.block_size_kernel = 16;
  s.num_blocks_kernel = 10;
  return s;
}

TEST(CacheSpecTest, ValidateNamesTheField) {
  CacheSpec s = Spec(Layout::kNHD);
  EXPECT_TRUE(s.Validate().ok());
  s.head_dim = 0;
  EXPECT_EQ(s.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.Validate().message().find("head_dim"), std::string_view::npos);
  s = Spec(Layout::kNHD);
  s.kind = AttentionKind::kMLA;
  EXPECT_EQ(s.Validate().code(), StatusCode::kInvalidArgument);  // MLA needs 1 head
  s.num_kv_heads = 1;
  EXPECT_TRUE(s.Validate().ok());
  s.mla_rope_dim = s.head_dim - 1;  // an MLA row: latent of 1 + rope key
  EXPECT_TRUE(s.Validate().ok());
  s.mla_rope_dim = s.head_dim;  // no room left for the latent
  EXPECT_NE(s.Validate().message().find("mla_rope_dim"), std::string_view::npos);
  s = Spec(Layout::kNHD);
  s.mla_rope_dim = 8;  // standard attention has no rope key of its own
  EXPECT_NE(s.Validate().message().find("mla_rope_dim"), std::string_view::npos);
  s = Spec(Layout::kNHD);
  s.num_blocks_kernel = -1;
  EXPECT_NE(s.Validate().message().find("num_blocks_kernel"), std::string_view::npos);
}

TEST(CacheSpecTest, BytesAndRegions) {
  const CacheSpec s = Spec(Layout::kNHD);
  EXPECT_EQ(s.num_regions(), 6);
  EXPECT_EQ(s.bytes_per_token_slot(), 4u * 8 * 2);
  EXPECT_EQ(s.bytes_per_kernel_block(), 16u * 64);
  EXPECT_EQ(s.region_bytes(), 10u * 1024);
  CacheSpec mla = s;
  mla.kind = AttentionKind::kMLA;
  mla.num_kv_heads = 1;
  EXPECT_EQ(mla.num_regions(), 3);
}

TEST(CacheSpecTest, ShapesStridesAndOffsetsAgree) {
  for (Layout layout : {Layout::kNHD, Layout::kHND}) {
    const CacheSpec s = Spec(layout);
    const std::vector<int64_t> shape = s.RegionShape();
    const std::vector<int64_t> strides = s.RegionStrides();
    ASSERT_EQ(shape.size(), 4u);
    EXPECT_EQ(shape[0] * strides[0] * static_cast<int64_t>(DTypeBytes(s.dtype)),
              static_cast<int64_t>(s.region_bytes()));
    for (int32_t b : {0, 3, 9}) {
      for (int32_t t : {0, 5, 15}) {
        for (int32_t h : {0, 3}) {
          const int64_t token_axis = layout == Layout::kNHD ? 1 : 2;
          const int64_t head_axis = layout == Layout::kNHD ? 2 : 1;
          const int64_t expected =
              b * strides[0] + t * strides[token_axis] + h * strides[head_axis];
          EXPECT_EQ(static_cast<int64_t>(s.ElementOffset(KernelBlockId(b), t, h)), expected);
        }
      }
    }
  }
  const CacheSpec nhd = Spec(Layout::kNHD);
  EXPECT_EQ(nhd.RegionShape(), (std::vector<int64_t>{10, 16, 4, 8}));
  EXPECT_EQ(nhd.RegionStrides(), (std::vector<int64_t>{512, 32, 8, 1}));
  const CacheSpec hnd = Spec(Layout::kHND);
  EXPECT_EQ(hnd.RegionShape(), (std::vector<int64_t>{10, 4, 16, 8}));
  EXPECT_EQ(hnd.RegionStrides(), (std::vector<int64_t>{512, 128, 8, 1}));
}

TEST(CacheSpecTest, AllocateIsAlignedZeroedAndGeometryRoundTrips) {
  CacheSpec s = Spec(Layout::kHND);
  s.head_dim = 3;  // region bytes not a multiple of 64: regions must still be aligned
  auto cache = KvCache::Allocate(s);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_EQ((*cache)->num_regions(), 6);
  for (int32_t r = 0; r < 6; ++r) {
    const RegionView v = (*cache)->region(r);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.base) % 64, 0u);
    EXPECT_EQ(v.size_bytes, s.region_bytes());
    for (size_t i = 0; i < v.size_bytes; ++i) ASSERT_EQ(v.base[i], std::byte{0});
  }
  EXPECT_EQ((*cache)->key_region(1).base, (*cache)->region(2).base);
  EXPECT_EQ((*cache)->value_region(1).base, (*cache)->region(3).base);
  auto geo = GeometryOf(**cache);
  ASSERT_TRUE(geo.ok()) << geo.status();
  EXPECT_EQ(*geo, s);
}

TEST(CacheSpecTest, BorrowViewsTheCallersMemoryAndChecksItsSize) {
  const CacheSpec s = Spec(Layout::kNHD);
  // Another engine's tensors: 64-byte aligned, a little longer than the spec needs.
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<std::byte, Free>> memory;
  std::vector<RegionView> regions;
  const size_t bytes = (s.region_bytes() + 64) / 64 * 64;
  for (int32_t r = 0; r < s.num_regions(); ++r) {
    memory.emplace_back(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
    regions.push_back({memory.back().get(), bytes});
  }
  auto cache = KvCache::Borrow(s, regions);
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int32_t r = 0; r < s.num_regions(); ++r) {
    EXPECT_EQ((*cache)->region(r).base, memory[r].get());
    EXPECT_EQ((*cache)->region(r).size_bytes, s.region_bytes());  // the spec's share of it
  }
  auto geo = GeometryOf(**cache);
  ASSERT_TRUE(geo.ok()) << geo.status().ToString();
  EXPECT_EQ(*geo, s);
  cache->reset();  // frees nothing: `memory` is the caller's (ASan would see a bad free)

  std::vector<RegionView> fewer(regions.begin(), regions.end() - 1);
  EXPECT_EQ(KvCache::Borrow(s, fewer).status().code(), StatusCode::kInvalidArgument);
  std::vector<RegionView> short_one = regions;
  short_one[2].size_bytes = s.region_bytes() - 1;
  auto refused = KvCache::Borrow(s, short_one);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("region 2"), std::string::npos);
  std::vector<RegionView> misaligned = regions;
  misaligned[1].base += 8;
  misaligned[1].size_bytes -= 8;
  EXPECT_EQ(KvCache::Borrow(s, misaligned).status().code(), StatusCode::kInvalidArgument);
}

// A CacheMemory that counts what it hands out and gets back, and fails its Nth allocation.
struct CountingMemory {
  std::map<std::byte*, int> live;  // base -> times released (must end at 1)
  int allocations = 0;
  int fail_at = -1;
  CacheMemory Hooks() {
    return CacheMemory{
        [this](size_t bytes) -> StatusOr<std::byte*> {
          if (allocations++ == fail_at) return ResourceExhaustedError("full");
          auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, 4096 * (1 + bytes / 4096)));
          std::fill(p, p + bytes, std::byte{0});
          live[p] = 0;
          return p;
        },
        [this](std::byte* p) {
          ++live.at(p);
          std::free(p);
        }};
  }
};

TEST(CacheSpecTest, AllocateThroughCacheMemoryTakesEachRegionFromItAndGivesItBack) {
  CountingMemory memory;
  const CacheSpec s = Spec(Layout::kNHD);
  {
    auto cache = KvCache::Allocate(s, memory.Hooks());
    ASSERT_TRUE(cache.ok()) << cache.status();
    ASSERT_EQ((*cache)->num_regions(), 6);
    EXPECT_EQ(memory.live.size(), 6u);
    for (int32_t r = 0; r < 6; ++r) EXPECT_EQ(memory.live.count((*cache)->region(r).base), 1u);
    auto geo = GeometryOf(**cache);
    ASSERT_TRUE(geo.ok()) << geo.status();
    EXPECT_EQ(*geo, s);
  }
  for (const auto& [base, released] : memory.live) EXPECT_EQ(released, 1);
}

TEST(CacheSpecTest, AFailedCacheMemoryAllocationGivesBackWhatItHad) {
  CountingMemory memory;
  memory.fail_at = 3;
  auto cache = KvCache::Allocate(Spec(Layout::kHND), memory.Hooks());
  EXPECT_EQ(cache.status().code(), StatusCode::kResourceExhausted);
  ASSERT_EQ(memory.live.size(), 3u);
  for (const auto& [base, released] : memory.live) EXPECT_EQ(released, 1);
  EXPECT_EQ(KvCache::Allocate(Spec(Layout::kHND), CacheMemory{}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(CacheSpecTest, AllocateRejectsInvalidSpec) {
  CacheSpec s = Spec(Layout::kNHD);
  s.num_layers = 0;
  EXPECT_EQ(KvCache::Allocate(s).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheSpecTest, ParseNames) {
  EXPECT_EQ(*ParseDType("f32"), DType::kF32);
  EXPECT_EQ(*ParseDType("f16"), DType::kF16);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(ParseDType("fp8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLayout("NHD"), Layout::kNHD);
  EXPECT_EQ(*ParseLayout("HND"), Layout::kHND);
  EXPECT_EQ(ParseLayout("NDH").status().code(), StatusCode::kInvalidArgument);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  for (Layout l : {Layout::kNHD, Layout::kHND}) EXPECT_EQ(*ParseLayout(LayoutName(l)), l);
  EXPECT_EQ(DTypeBytes(DType::kF32), 4u);
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2u);
}

}  // namespace
}  // namespace kvferry::kv

namespace kvferry::kv {
namespace {

// The numbers of docs/kv_layout.md's worked example.
TEST(CacheSpecTest, DocsWorkedExample) {
  const int32_t bs_kernel = *SelectKernelBlockSize(128, FlashAttentionBackend());
  ASSERT_EQ(bs_kernel, 64);
  const BlockGeometry g = *BlockGeometry::Create(128, bs_kernel);
  EXPECT_EQ(g.kernel_blocks_per_logical(), 2);
  CacheSpec s;
  s.num_layers = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.dtype = DType::kBF16;
  s.layout = Layout::kNHD;
  s.block_size_kernel = bs_kernel;
  s.num_blocks_kernel = 2000;
  ASSERT_TRUE(s.Validate().ok());
  EXPECT_EQ(s.num_regions(), 64);
  EXPECT_EQ(s.bytes_per_token_slot(), 2048u);
  EXPECT_EQ(s.bytes_per_kernel_block(), 131072u);
  EXPECT_EQ(s.region_bytes(), 262144000u);
  const KernelBlockRange r = g.KernelBlocksOf(LogicalBlockId(3));
  EXPECT_EQ(r[0], KernelBlockId(6));
  EXPECT_EQ(r[1], KernelBlockId(7));
  EXPECT_EQ(r[0].value() * s.bytes_per_kernel_block(), 786432u);
  EXPECT_EQ((r[1].value() + 1) * s.bytes_per_kernel_block(), 1048576u);
  const std::vector<LogicalBlockId> table{LogicalBlockId(5), LogicalBlockId(3)};
  const KernelSlot slot = *g.KernelSlotOfToken(table, 200);
  EXPECT_EQ(slot, (KernelSlot{KernelBlockId(7), 8}));
  EXPECT_EQ(s.ElementOffset(slot.block, slot.token_in_block, 2) * 2, 934400u);
  CacheSpec hnd = s;
  hnd.layout = Layout::kHND;
  EXPECT_EQ(hnd.ElementOffset(slot.block, slot.token_in_block, 2) * 2, 952320u);
}

// A head slice of a run of kernel blocks: the whole run when all heads, one range per block in
// HND, one per (block, token) in NHD; every byte of the slice exactly once, nothing else.
TEST(CacheSpecTest, HeadSliceBytes) {
  for (Layout layout : {Layout::kNHD, Layout::kHND}) {
    const CacheSpec s = Spec(layout);  // 4 heads x 8 dims x bf16, kernel blocks of 16
    const auto all = s.HeadSliceBytes(KernelBlockId(3), 2, 0, 4);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].offset, s.KernelBlockBytes(KernelBlockId(3)).offset);
    EXPECT_EQ(all[0].length, 2 * s.bytes_per_kernel_block());

    const auto slice = s.HeadSliceBytes(KernelBlockId(3), 2, 1, 2);
    EXPECT_EQ(slice.size(), layout == Layout::kHND ? 2u : 32u);
    std::vector<bool> covered(s.region_bytes(), false);
    for (const CacheSpec::ByteRange& r : slice) {
      for (uint64_t i = r.offset; i < r.offset + r.length; ++i) {
        ASSERT_FALSE(covered[i]);
        covered[i] = true;
      }
    }
    uint64_t want_bytes = 0;
    for (int32_t b : {3, 4}) {
      for (int32_t t = 0; t < 16; ++t) {
        for (int32_t h = 0; h < 4; ++h) {
          const size_t off = s.ElementOffset(KernelBlockId(b), t, h) * 2;
          const bool in = h == 1 || h == 2;
          for (size_t i = off; i < off + 16; ++i) EXPECT_EQ(covered[i], in);
          want_bytes += in ? 16 : 0;
        }
      }
    }
    uint64_t got_bytes = 0;
    for (const CacheSpec::ByteRange& r : slice) got_bytes += r.length;
    EXPECT_EQ(got_bytes, want_bytes);
    // In order: offsets increase.
    for (size_t i = 1; i < slice.size(); ++i) EXPECT_GT(slice[i].offset, slice[i - 1].offset);
  }
}

}  // namespace
}  // namespace kvferry::kv
