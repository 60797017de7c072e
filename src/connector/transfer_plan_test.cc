#include "connector/transfer_plan.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>

#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {
namespace {

KernelRun KRun(int32_t remote_first, int32_t local_first, int32_t count) {
  return {kv::KernelBlockId(remote_first), kv::KernelBlockId(local_first), count};
}

using kv::KernelBlockId;
using kv::Layout;
using kv::LogicalBlockId;

std::vector<LogicalBlockId> Ids(std::initializer_list<int32_t> v) {
  std::vector<LogicalBlockId> out;
  for (int32_t x : v) out.emplace_back(x);
  return out;
}

SideGeometry Side(int32_t logical, int32_t kernel, Layout layout, int32_t num_blocks_kernel,
                  int32_t heads = 2, int32_t head_dim = 4) {
  SideGeometry s;
  s.block_size_logical = logical;
  s.spec.num_layers = 2;
  s.spec.num_kv_heads = heads;
  s.spec.head_dim = head_dim;
  s.spec.dtype = kv::DType::kF32;
  s.spec.layout = layout;
  s.spec.block_size_kernel = kernel;
  s.spec.num_blocks_kernel = num_blocks_kernel;
  return s;
}

TEST(TransferPlanTest, EqualGeometryReadsDirectlyAndCoalesces) {
  auto remote = Ids({3, 4, 7});
  auto local = Ids({0, 1, 2});
  auto plan = PlanPull({.remote = Side(128, 64, Layout::kNHD, 64),
                        .local = Side(128, 64, Layout::kNHD, 64),
                        .remote_block_ids = remote,
                        .local_block_ids = local,
                        .token_end = 300});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->direct);
  // P kernel blocks 6,7,8,9,14 -> D kernel blocks 0,1,2,3,4.
  EXPECT_EQ(plan->runs, (std::vector<KernelRun>{KRun(6, 0, 4), KRun(14, 4, 1)}));
  EXPECT_EQ(plan->num_descriptors(), 2u * 4u);
  EXPECT_EQ(plan->total_bytes(), 5u * 4u * 64u * 2u * 4u * 4u);
  EXPECT_EQ(plan->remote_logical_blocks, remote);
  EXPECT_EQ(plan->local_logical_blocks, local);
}

TEST(TransferPlanTest, EachSideMapsWithItsOwnR) {
  // P: logical 128 / kernel 64 (R=2); D: logical 64 / kernel 64 (R=1); D has a 1-block prefix
  // hit, so tokens [64, 256) are pulled.
  auto remote = Ids({2, 5});
  auto local = Ids({9, 10, 11, 12});
  auto plan = PlanPull({.remote = Side(128, 64, Layout::kNHD, 64),
                        .local = Side(64, 64, Layout::kNHD, 64),
                        .remote_block_ids = remote,
                        .local_block_ids = local,
                        .token_begin = 64,
                        .token_end = 256});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->direct);
  EXPECT_EQ(plan->runs, (std::vector<KernelRun>{KRun(5, 10, 1), KRun(10, 11, 2)}));
  EXPECT_EQ(plan->remote_logical_blocks, Ids({2, 5}));
  EXPECT_EQ(plan->remote_logical_index, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan->local_logical_blocks, Ids({10, 11, 12}));
}

// The staged pull two tests plan: P logical 128 / kernel 64 HND, D logical 64 / kernel 32 NHD,
// D with a one-block prefix hit: tokens [64, 200). Not copyable: `req` views the ids.
struct StagedPull {
  std::vector<LogicalBlockId> remote = Ids({1, 0});
  std::vector<LogicalBlockId> local = Ids({4, 5, 6, 7});
  PullRequest req{.remote = Side(128, 64, Layout::kHND, 16),
                  .local = Side(64, 32, Layout::kNHD, 64),
                  .remote_block_ids = remote,
                  .local_block_ids = local,
                  .token_begin = 64,
                  .token_end = 200};
  StagedPull() = default;
  StagedPull(const StagedPull&) = delete;
  StagedPull& operator=(const StagedPull&) = delete;
};

TEST(TransferPlanTest, DifferentLayoutOrKernelSizeIsStaged) {
  const StagedPull staged;
  auto plan = PlanPull(staged.req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->direct);
  // Chunks of 64 tokens 1..3: P kernel 3, 0, 1 -> slots 0, 1, 2.
  EXPECT_EQ(plan->runs, (std::vector<KernelRun>{KRun(3, 0, 1), KRun(0, 1, 2)}));
  EXPECT_EQ(plan->num_staging_slots, 3);
  EXPECT_EQ(plan->staging_block_table,
            (std::vector<KernelBlockId>{KernelBlockId(0), KernelBlockId(0), KernelBlockId(1),
                                        KernelBlockId(2)}));
  // Host buffer on D: staged even with equal geometry.
  PullRequest host = staged.req;
  auto remote4 = Ids({8, 9, 10, 11});
  host.remote_block_ids = remote4;
  host.remote = Side(64, 32, Layout::kNHD, 64);
  host.local_cache_registered = false;
  auto hp = PlanPull(host);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_FALSE(hp->direct);
}

TEST(TransferPlanTest, ValidatesIdsBeforeBuilding) {
  auto remote = Ids({1, 40});  // P has 64 kernel blocks / R=2 = 32 logical blocks
  auto local = Ids({0, 1});
  PullRequest req{.remote = Side(128, 64, Layout::kNHD, 64),
                  .local = Side(128, 64, Layout::kNHD, 64),
                  .remote_block_ids = remote,
                  .local_block_ids = local,
                  .token_end = 10};
  auto plan = PlanPull(req);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(plan.status().message().find("40"), std::string_view::npos) << plan.status();

  auto short_remote = Ids({1});
  req.remote_block_ids = short_remote;
  req.token_end = 129;
  EXPECT_EQ(PlanPull(req).status().code(), StatusCode::kOutOfRange);

  auto ok_remote = Ids({1, 2});
  req.remote_block_ids = ok_remote;
  req.remote = Side(128, 64, Layout::kNHD, 64, /*heads=*/4);
  EXPECT_EQ(PlanPull(req).status().code(), StatusCode::kInvalidArgument);
}

TEST(TransferPlanTest, FullHitIsAnEmptyPlan) {
  auto remote = Ids({1, 2});
  auto local = Ids({0, 1});
  auto plan = PlanPull({.remote = Side(128, 64, Layout::kNHD, 64),
                        .local = Side(128, 64, Layout::kNHD, 64),
                        .remote_block_ids = remote,
                        .local_block_ids = local,
                        .token_begin = 256,
                        .token_end = 256});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->runs.empty());
  EXPECT_TRUE(plan->local_logical_blocks.empty());
  EXPECT_EQ(plan->num_descriptors(), 0u);
}

TEST(TransferPlanTest, DescriptorsAddressRegionsAndStagingSlots) {
  const StagedPull staged;
  auto plan = PlanPull(staged.req);
  ASSERT_TRUE(plan.ok());
  std::vector<transfer::RegionHandle> rr = {{11}, {12}, {13}, {14}};
  std::vector<transfer::RegionHandle> staging = {{99}};
  DescriptorPair d = BuildDescriptors(*plan, rr, staging);
  const uint64_t b = plan->remote_spec.bytes_per_kernel_block();
  ASSERT_EQ(d.local.size(), 8u);
  ASSERT_EQ(d.remote.size(), 8u);
  // Region 2, second run: remote block 0 (2 blocks) -> staging slot 1 of region 2.
  EXPECT_EQ(d.remote[5].region.id, 13u);
  EXPECT_EQ(d.remote[5].offset, 0u);
  EXPECT_EQ(d.remote[5].length, 2 * b);
  EXPECT_EQ(d.local[5].region.id, 99u);
  EXPECT_EQ(d.local[5].offset, (2 * 3 + 1) * b);
  EXPECT_EQ(d.local[5].length, 2 * b);
}

// Executes plans on plain memory: P's cache holds a distinct pattern per (region, token, head,
// element); after the descriptors' memcpys (and the staged re-layout) D must hold exactly P's
// tokens [begin, end), in D's geometry, over a matrix of geometries.
uint32_t Pattern(int32_t region, int64_t token, int32_t head, int32_t e) {
  return (static_cast<uint32_t>(region) << 26) | (static_cast<uint32_t>(token) << 8) |
         (static_cast<uint32_t>(head) << 4) | static_cast<uint32_t>(e);
}

struct Mem {
  kv::CacheSpec spec;
  std::vector<std::vector<uint32_t>> regions;
  explicit Mem(const kv::CacheSpec& s) : spec(s) {
    regions.assign(s.num_regions(), std::vector<uint32_t>(s.region_bytes() / 4, 0));
  }
  uint32_t* Slot(int32_t r, KernelBlockId kb, int32_t tok, int32_t head) {
    return regions[r].data() + spec.ElementOffset(kb, tok, head);
  }
};

// A tensor-parallel pull: P's rank holds p_heads, D's rank d_heads, and `range` moves some of
// them (count -1: all, p_heads == d_heads).
struct Heads {
  int32_t p_heads = 2;
  int32_t d_heads = 2;
  kv::HeadRange range;
};

// The descriptors are coalesced as far as the layouts allow: no two neighbours in one region
// are contiguous on both sides.
void ExpectCoalesced(const DescriptorPair& d) {
  for (size_t i = 1; i < d.local.size(); ++i) {
    const auto& r0 = d.remote[i - 1];
    const auto& r1 = d.remote[i];
    const auto& l0 = d.local[i - 1];
    const auto& l1 = d.local[i];
    const bool both = r0.region.id == r1.region.id && r0.offset + r0.length == r1.offset &&
                      l0.region.id == l1.region.id && l0.offset + l0.length == l1.offset;
    ASSERT_FALSE(both) << "descriptors " << i - 1 << " and " << i << " could be one";
  }
}

void RunMatrixCase(int32_t lp, int32_t kp, Layout layp, int32_t ld, int32_t kd, Layout layd,
                   bool registered, int64_t prompt, int64_t begin, std::mt19937& rng,
                   const Heads& heads = {}) {
  SCOPED_TRACE(::testing::Message()
               << "P " << lp << "/" << kp << "/" << kv::LayoutName(layp) << " D " << ld << "/" << kd
               << "/" << kv::LayoutName(layd) << " registered=" << registered << " tokens ["
               << begin << ", " << prompt << ") heads " << heads.p_heads << "->" << heads.d_heads
               << " [" << heads.range.src_first << "->" << heads.range.dst_first << " x"
               << heads.range.count << "]");
  SideGeometry ps = Side(lp, kp, layp, 16 * (1024 / kp), heads.p_heads);
  SideGeometry ds = Side(ld, kd, layd, 16 * (1024 / kd), heads.d_heads);
  const kv::HeadRange moved =
      heads.range.count < 0 ? kv::HeadRange{0, 0, heads.p_heads} : heads.range;
  auto pg = kv::BlockGeometry::Create(lp, kp);
  auto dg = kv::BlockGeometry::Create(ld, kd);
  ASSERT_TRUE(pg.ok() && dg.ok());
  // Random distinct logical ids on each side.
  auto pick = [&](int32_t count, int32_t total) {
    std::vector<int32_t> all(total);
    for (int32_t i = 0; i < total; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<LogicalBlockId> out;
    for (int32_t i = 0; i < count; ++i) out.emplace_back(all[i]);
    return out;
  };
  auto remote =
      pick(static_cast<int32_t>((prompt + lp - 1) / lp), ps.spec.num_blocks_kernel / (lp / kp));
  auto local =
      pick(static_cast<int32_t>((prompt + ld - 1) / ld), ds.spec.num_blocks_kernel / (ld / kd));
  Mem p(ps.spec), d(ds.spec);
  auto pkt = pg->ExpandBlockTable(remote);
  auto dkt = dg->ExpandBlockTable(local);
  for (int32_t r = 0; r < ps.spec.num_regions(); ++r) {
    for (int64_t t = 0; t < prompt; ++t) {
      for (int32_t h = 0; h < ps.spec.num_kv_heads; ++h) {
        uint32_t* s = p.Slot(r, pkt[t / kp], static_cast<int32_t>(t % kp), h);
        for (int32_t e = 0; e < ps.spec.head_dim; ++e) s[e] = Pattern(r, t, h, e);
      }
    }
  }
  auto plan = PlanPull({.remote = ps,
                        .local = ds,
                        .local_cache_registered = registered,
                        .remote_block_ids = remote,
                        .local_block_ids = local,
                        .token_begin = begin,
                        .token_end = prompt,
                        .heads = heads.range});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint64_t b = plan->StagingSpec().bytes_per_kernel_block();
  std::vector<uint32_t> staging(plan->num_staging_slots * ps.spec.num_regions() * b / 4 + 1);
  std::vector<transfer::RegionHandle> rr, lr;
  for (int32_t r = 0; r < ps.spec.num_regions(); ++r) {
    rr.push_back({static_cast<uint32_t>(r)});
    lr.push_back({static_cast<uint32_t>(r)});
  }
  DescriptorPair desc = BuildDescriptors(*plan, rr, lr);
  ExpectCoalesced(desc);
  EXPECT_EQ(desc.local.size(), plan->num_descriptors());
  // Exactly the moved heads of P's kernel blocks covering [begin, prompt), in every region.
  const uint64_t p_blocks = (prompt + kp - 1) / kp - begin / kp;
  EXPECT_EQ(plan->total_bytes(),
            p_blocks * kp * moved.count * ps.spec.head_dim * 4 * ps.spec.num_regions());
  uint64_t described = 0;
  for (const transfer::Descriptor& x : desc.remote) described += x.length;
  EXPECT_EQ(described, plan->total_bytes());
  for (size_t i = 0; i < desc.local.size(); ++i) {
    const transfer::Descriptor& rd = desc.remote[i];
    const transfer::Descriptor& ld2 = desc.local[i];
    ASSERT_EQ(rd.length, ld2.length);
    auto* src = reinterpret_cast<const std::byte*>(p.regions[rd.region.id].data()) + rd.offset;
    std::byte* dst =
        plan->direct ? reinterpret_cast<std::byte*>(d.regions[ld2.region.id].data()) + ld2.offset
                     : reinterpret_cast<std::byte*>(staging.data()) + ld2.offset;
    ASSERT_LE(ld2.offset + ld2.length, plan->direct ? ds.spec.region_bytes() : staging.size() * 4);
    std::memcpy(dst, src, rd.length);
  }
  if (!plan->direct) {
    const kv::CacheSpec sspec = plan->StagingSpec();
    kv::KvSourceView sv{sspec, {}, plan->staging_block_table};
    for (int32_t r = 0; r < sspec.num_regions(); ++r) {
      sv.regions.push_back(reinterpret_cast<const std::byte*>(staging.data()) +
                           r * sspec.region_bytes());
    }
    kv::KvDestView dv{ds.spec, {}, dkt};
    for (auto& reg : d.regions) dv.regions.push_back(reinterpret_cast<std::byte*>(reg.data()));
    ASSERT_TRUE(kv::RelayoutTokens(sv, dv, begin, prompt, {0, moved.dst_first, moved.count}).ok());
  }
  for (int32_t r = 0; r < ds.spec.num_regions(); ++r) {
    for (int64_t t = 0; t < prompt; ++t) {
      for (int32_t h = 0; h < ds.spec.num_kv_heads; ++h) {
        const uint32_t* s = d.Slot(r, dkt[t / kd], static_cast<int32_t>(t % kd), h);
        const int32_t i = h - moved.dst_first;
        const bool pulled = t >= begin && i >= 0 && i < moved.count;
        for (int32_t e = 0; e < ds.spec.head_dim; ++e) {
          uint32_t want = pulled ? Pattern(r, t, moved.src_first + i, e) : 0u;
          ASSERT_EQ(s[e], want) << "region " << r << " token " << t << " head " << h;
        }
      }
    }
  }
}

TEST(TransferPlanTest, GeometryMatrixMovesExactlyTheRightTokens) {
  std::mt19937 rng(7);
  const int32_t logical[] = {16, 64, 128, 256};
  const Layout layouts[] = {Layout::kNHD, Layout::kHND};
  for (int32_t lp : logical) {
    for (int32_t ld : logical) {
      for (Layout layp : layouts) {
        for (Layout layd : layouts) {
          for (bool registered : {true, false}) {
            // Kernel sizes: "flash" picks min(64, L); "paged" keeps L.
            for (int32_t kp : {std::min(lp, 64), lp}) {
              for (int32_t kd : {std::min(ld, 64), ld}) {
                const int32_t bigger = std::max(lp, ld);
                // A prompt shorter than a block, and one spanning many, with and without a
                // D prefix hit of one D block.
                for (int64_t prompt : {int64_t{5}, int64_t{3} * bigger + 7}) {
                  RunMatrixCase(lp, kp, layp, ld, kd, layd, registered, prompt, 0, rng);
                  if (prompt > ld) {
                    RunMatrixCase(lp, kp, layp, ld, kd, layd, registered, prompt, ld, rng);
                  }
                  if (HasFatalFailure()) return;
                }
              }
            }
          }
        }
      }
    }
  }
}

// Tensor-parallel pulls on plain memory: each (P rank, D rank) head mapping the rank plans
// produce — a slice of P's heads into all of D's, all of P's into a slice of D's, a slice into
// a slice — over layouts, kernel sizes, registered / host-buffer D, with and without a prefix
// hit: the right heads arrive, nothing else is touched, bytes are exactly the moved heads'.
TEST(TransferPlanTest, HeadSlicesMoveExactlyTheirHeads) {
  std::mt19937 rng(11);
  const std::vector<Heads> slices = {
      {2, 1, {1, 0, 1}},  // P TP 1 (2 heads) -> D TP 2, rank 1
      {1, 2, {0, 1, 1}},  // P TP 2, rank 1 -> D TP 1
      {4, 2, {2, 0, 2}},  // P TP 1 (4 heads) -> D TP 2, rank 1
      {2, 4, {0, 2, 2}},  // P TP 2 -> D TP 1 (4 heads), rank 1's half
      {2, 1, {0, 0, 1}},  // replicated on D: D TP 4 rank 1 reads head 0 of P TP 1's two
  };
  for (const Heads& h : slices) {
    for (Layout layp : {Layout::kNHD, Layout::kHND}) {
      for (Layout layd : {Layout::kNHD, Layout::kHND}) {
        for (bool registered : {true, false}) {
          for (auto [lp, kp, ld, kd] :
               {std::array<int32_t, 4>{16, 16, 16, 16}, std::array<int32_t, 4>{128, 64, 16, 16},
                std::array<int32_t, 4>{16, 16, 128, 64}, std::array<int32_t, 4>{64, 64, 64, 64}}) {
            RunMatrixCase(lp, kp, layp, ld, kd, layd, registered, 300, 0, rng, h);
            RunMatrixCase(lp, kp, layp, ld, kd, layd, registered, 300, ld, rng, h);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// The coalesced descriptor counts of docs/connector.md's rank-mapping example: 300 tokens,
// kernel blocks of 16 (19 P blocks), 2 layers (4 regions).
TEST(TransferPlanTest, HeadSliceDescriptorCounts) {
  auto count = [](Layout layout, int32_t p_heads, int32_t d_heads, kv::HeadRange range) {
    auto remote = Ids({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
    auto local = Ids({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
    return PlanPull({.remote = Side(16, 16, layout, 64, p_heads),
                     .local = Side(16, 16, layout, 64, d_heads),
                     .remote_block_ids = remote,
                     .local_block_ids = local,
                     .token_end = 300,
                     .heads = range})
        .value()
        .num_descriptors();
  };
  // Whole blocks on both sides: one run, one descriptor per region.
  EXPECT_EQ(count(Layout::kHND, 2, 2, {}), 4u);
  // HND, a slice on one side: one descriptor per block per region.
  EXPECT_EQ(count(Layout::kHND, 2, 1, {1, 0, 1}), 19u * 4);
  EXPECT_EQ(count(Layout::kHND, 1, 2, {0, 1, 1}), 19u * 4);
  // NHD, a slice: strided, one descriptor per token slot per region.
  EXPECT_EQ(count(Layout::kNHD, 2, 1, {1, 0, 1}), 19u * 16 * 4);
  EXPECT_EQ(count(Layout::kNHD, 1, 2, {0, 1, 1}), 19u * 16 * 4);
  // A TP-1 P of one head into a TP-1 D of one head: whole blocks again.
  EXPECT_EQ(count(Layout::kNHD, 1, 1, {0, 0, 1}), 4u);
}

}  // namespace
}  // namespace kvferry::connector::internal
