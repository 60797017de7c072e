#include "connector/transfer_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status CheckIds(std::span<const kv::LogicalBlockId> ids, int64_t needed, int32_t num_blocks,
                std::string_view side) {
  if (static_cast<int64_t>(ids.size()) < needed) {
    return OutOfRangeError(
        fmt::format("{} block list has {} logical blocks, the pulled tokens "
                    "need {}",
                    side, ids.size(), needed));
  }
  for (kv::LogicalBlockId id : ids) {
    if (id.value() < 0 || id.value() >= num_blocks) {
      return OutOfRangeError(
          fmt::format("{} logical block id {} is outside [0, {})", side, id.value(), num_blocks));
    }
  }
  return Status::Ok();
}

// One descriptor pair within region 0 (offsets relative to the region; for staged pulls, to
// the staging area of region 0).
struct Piece {
  uint64_t remote = 0;
  uint64_t local = 0;
  uint64_t length = 0;
};

// Cuts two equally long lists of byte ranges (the same elements in the same order on both
// sides) at every gap of either, and joins neighbours contiguous on both sides.
void Zip(const std::vector<kv::CacheSpec::ByteRange>& remote,
         const std::vector<kv::CacheSpec::ByteRange>& local, std::vector<Piece>* out) {
  size_t i = 0, j = 0;
  uint64_t ri = 0, lj = 0;  // bytes consumed of remote[i], local[j]
  while (i < remote.size() && j < local.size()) {
    const uint64_t n = std::min(remote[i].length - ri, local[j].length - lj);
    const Piece p{remote[i].offset + ri, local[j].offset + lj, n};
    if (!out->empty() && out->back().remote + out->back().length == p.remote &&
        out->back().local + out->back().length == p.local) {
      out->back().length += n;
    } else {
      out->push_back(p);
    }
    ri += n;
    lj += n;
    if (ri == remote[i].length) ++i, ri = 0;
    if (lj == local[j].length) ++j, lj = 0;
  }
}

// The pieces of region 0; every other region has the same ones (same layout, same offsets).
std::vector<Piece> PiecesOfRegion(const PullPlan& plan) {
  const kv::CacheSpec staging = plan.StagingSpec();
  const kv::HeadRange& h = plan.heads;
  std::vector<Piece> pieces;
  for (const KernelRun& run : plan.runs) {
    const auto remote =
        plan.remote_spec.HeadSliceBytes(run.remote_first, run.count, h.src_first, h.count);
    const auto local = plan.direct ? plan.local_spec.HeadSliceBytes(run.local_first, run.count,
                                                                    h.dst_first, h.count)
                                   : staging.HeadSliceBytes(run.local_first, run.count, 0, h.count);
    Zip(remote, local, &pieces);
  }
  return pieces;
}

}  // namespace

kv::CacheSpec PullPlan::StagingSpec() const {
  kv::CacheSpec staging = remote_spec;
  staging.num_kv_heads = heads.count > 0 ? heads.count : remote_spec.num_kv_heads;
  staging.num_blocks_kernel = num_staging_slots;
  return staging;
}

uint64_t PullPlan::total_bytes() const {
  uint64_t bytes = 0;
  for (const Piece& p : PiecesOfRegion(*this)) bytes += p.length;
  return bytes * static_cast<uint64_t>(remote_spec.num_regions());
}

uint64_t PullPlan::num_descriptors() const {
  return PiecesOfRegion(*this).size() * static_cast<uint64_t>(remote_spec.num_regions());
}

std::vector<kv::LogicalBlockId> LocalBlocksForTokens(std::span<const kv::LogicalBlockId> ids,
                                                     int32_t block_size_logical,
                                                     int64_t token_begin, int64_t token_end) {
  std::vector<kv::LogicalBlockId> out;
  if (token_end <= token_begin || block_size_logical <= 0) return out;
  int64_t first = token_begin / block_size_logical;
  int64_t last =
      std::min<int64_t>(CeilDiv(token_end, block_size_logical), static_cast<int64_t>(ids.size()));
  for (int64_t i = first; i < last; ++i) out.push_back(ids[i]);
  return out;
}

StatusOr<PullPlan> PlanPull(const PullRequest& req) {
  const kv::CacheSpec& rs = req.remote.spec;
  const kv::CacheSpec& ls = req.local.spec;
  KVF_RETURN_IF_ERROR(kv::CheckRelayoutCompatible(rs, ls, req.heads));
  KVF_ASSIGN_OR_RETURN(
      kv::BlockGeometry rg,
      kv::BlockGeometry::Create(req.remote.block_size_logical, rs.block_size_kernel));
  KVF_ASSIGN_OR_RETURN(kv::BlockGeometry lg, kv::BlockGeometry::Create(req.local.block_size_logical,
                                                                       ls.block_size_kernel));
  if (req.token_begin < 0 || req.token_end < req.token_begin) {
    return InvalidArgumentError(
        fmt::format("pull token range [{}, {}) is invalid", req.token_begin, req.token_end));
  }
  const int32_t remote_logical_count = rs.num_blocks_kernel / rg.kernel_blocks_per_logical();
  const int32_t local_logical_count = ls.num_blocks_kernel / lg.kernel_blocks_per_logical();
  // Validate every id before building anything (P's ids come from the network).
  KVF_RETURN_IF_ERROR(CheckIds(req.remote_block_ids,
                               CeilDiv(req.token_end, req.remote.block_size_logical),
                               remote_logical_count, "remote (P)"));
  KVF_RETURN_IF_ERROR(CheckIds(req.local_block_ids,
                               CeilDiv(req.token_end, req.local.block_size_logical),
                               local_logical_count, "local (D)"));

  PullPlan plan;
  plan.token_begin = req.token_begin;
  plan.token_end = req.token_end;
  plan.remote_spec = rs;
  plan.local_spec = ls;
  plan.heads = req.heads.count < 0 ? kv::HeadRange{0, 0, rs.num_kv_heads} : req.heads;
  plan.local_logical_blocks = LocalBlocksForTokens(
      req.local_block_ids, req.local.block_size_logical, req.token_begin, req.token_end);
  if (req.token_end == req.token_begin) return plan;  // full prefix hit: notification only

  const int32_t kp = rs.block_size_kernel;
  plan.direct = req.local_cache_registered && kp == ls.block_size_kernel &&
                rs.layout == ls.layout && req.token_begin % kp == 0;

  const int64_t first_chunk = req.token_begin / kp;
  const int64_t end_chunk = CeilDiv(req.token_end, kp);
  for (int64_t c = first_chunk; c < end_chunk; ++c) {
    KVF_ASSIGN_OR_RETURN(kv::KernelBlockId remote,
                         rg.KernelBlockOfToken(req.remote_block_ids, c * kp));
    kv::KernelBlockId local(static_cast<int32_t>(plan.remote_kernel_blocks.size()));  // slot
    if (plan.direct) {
      KVF_ASSIGN_OR_RETURN(local, lg.KernelBlockOfToken(req.local_block_ids, c * kp));
    }
    plan.remote_kernel_blocks.push_back(remote);
    KernelRun* last = plan.runs.empty() ? nullptr : &plan.runs.back();
    if (last != nullptr && last->remote_first.value() + last->count == remote.value() &&
        last->local_first.value() + last->count == local.value()) {
      ++last->count;
    } else {
      plan.runs.push_back({remote, local, 1});
    }
  }
  if (!plan.direct) {
    plan.num_staging_slots = static_cast<int32_t>(plan.remote_kernel_blocks.size());
    plan.staging_block_table.assign(static_cast<size_t>(end_chunk), kv::KernelBlockId(0));
    for (int64_t c = first_chunk; c < end_chunk; ++c) {
      plan.staging_block_table[c] = kv::KernelBlockId(static_cast<int32_t>(c - first_chunk));
    }
  }
  const int32_t lp = req.remote.block_size_logical;
  for (int64_t i = req.token_begin / lp; i < CeilDiv(req.token_end, lp); ++i) {
    plan.remote_logical_blocks.push_back(req.remote_block_ids[i]);
    plan.remote_logical_index.push_back(static_cast<int32_t>(i));
  }
  return plan;
}

DescriptorPair BuildDescriptors(const PullPlan& plan,
                                std::span<const transfer::RegionHandle> remote_regions,
                                std::span<const transfer::RegionHandle> local_regions) {
  DescriptorPair out;
  const std::vector<Piece> pieces = PiecesOfRegion(plan);
  const uint64_t staging_region = plan.StagingSpec().region_bytes();
  const int32_t regions = plan.remote_spec.num_regions();
  out.local.reserve(pieces.size() * regions);
  out.remote.reserve(pieces.size() * regions);
  for (int32_t r = 0; r < regions; ++r) {
    for (const Piece& p : pieces) {
      out.remote.push_back({remote_regions[r], p.remote, p.length});
      if (plan.direct) {
        out.local.push_back({local_regions[r], p.local, p.length});
      } else {
        out.local.push_back({local_regions[0], r * staging_region + p.local, p.length});
      }
    }
  }
  return out;
}

}  // namespace kvferry::connector::internal
