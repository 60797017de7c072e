// Pull planning: which of P's kernel blocks D reads, where they land, as coalesced descriptors.
// Pure functions (docs/architecture.md, conventions: "Plan, then apply"): a plan is a value; the
// worker applies it in one place.
//
// Inputs are LOGICAL ids on both sides (P's from kv_transfer_params, D's from its scheduler);
// each side's ids are mapped to kernel ids with that side's own kv::BlockGeometry (its own R).
// Token t of the prompt lives on P in kernel block KernelBlocksOf(P_ids[t / Lp])[(t % Lp) / Kp]
// and goes to the same token t on D.
//
// Two modes:
//   direct  P's and D's kernel block size and layout are equal, the pulled range starts on a
//           kernel block boundary and D's cache is registered: P kernel block -> D kernel block,
//           byte for byte.
//   staged  anything else: P's kernel blocks are read into slots 0..S-1 of a staging buffer
//           (region-major: region r, slot s at (r*S + s) * P.bytes_per_kernel_block) and D
//           re-lays them out into its cache with kv::RelayoutTokens.
// Runs of kernel blocks consecutive on both sides become one descriptor per region.
//
// Tensor parallelism: a pull may move only some heads (`heads`: P rank-local heads
// [src_first, +count) into D rank-local heads [dst_first, +count); docs/connector.md, "Rank
// mapping"). Each kernel block then contributes its head slice (kv::CacheSpec::HeadSliceBytes):
// contiguous per block in HND, one range per token in NHD; the staging buffer holds just the
// slice. The byte ranges of both sides are cut where either side has a gap and re-joined where
// both are contiguous (coalesced), so the descriptor count is the smallest the layouts allow.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/relayout.h"
#include "kvferry/transfer/types.h"

namespace kvferry::connector::internal {

// One side's geometry as the planner needs it.
struct SideGeometry {
  kv::CacheSpec spec;  // kernel block size, layout, num_blocks_kernel, bytes per kernel block
  int32_t block_size_logical = 0;
};

struct PullRequest {
  SideGeometry remote;                 // P
  SideGeometry local;                  // D
  bool local_cache_registered = true;  // false with D's host buffer: always staged
  std::span<const kv::LogicalBlockId> remote_block_ids;  // P's, all of the request's
  std::span<const kv::LogicalBlockId> local_block_ids;   // D's, all of the request's
  int64_t token_begin = 0;                               // D's num_local_computed_tokens
  int64_t token_end = 0;                                 // token_begin + num_external_tokens
  kv::HeadRange heads;  // P-rank heads -> D-rank heads; default: all (equal head counts)
};

// A run of `count` kernel blocks: remote [remote_first, +count) -> local [local_first, +count).
// Both are KERNEL ids (a logical id here does not compile): P's kernel blocks, and D's when
// direct, or the staging buffer's slots when staged (the staging buffer is a cache of P's
// geometry with num_staging_slots kernel blocks, PullPlan::StagingSpec()).
struct KernelRun {
  kv::KernelBlockId remote_first;
  kv::KernelBlockId local_first;
  int32_t count = 0;
  friend bool operator==(const KernelRun&, const KernelRun&) = default;
};

struct PullPlan {
  bool direct = false;
  int64_t token_begin = 0;
  int64_t token_end = 0;
  std::vector<KernelRun> runs;
  // P kernel blocks in token order (staging slot s holds remote_kernel_blocks[s]).
  std::vector<kv::KernelBlockId> remote_kernel_blocks;
  int32_t num_staging_slots = 0;  // 0 when direct
  // Staged re-layout source table: entry c (token chunk t / Kp) = its staging slot; entries
  // before the first pulled chunk are 0 and never read.
  std::vector<kv::KernelBlockId> staging_block_table;
  // P's logical blocks the read touches, in order, with their index in remote_block_ids (for the
  // generation check).
  std::vector<kv::LogicalBlockId> remote_logical_blocks;
  std::vector<int32_t> remote_logical_index;
  // D's logical blocks the load writes: what a failure reports as invalid.
  std::vector<kv::LogicalBlockId> local_logical_blocks;
  kv::CacheSpec remote_spec;  // P's cache (or host buffer): where the runs' remote ids point
  kv::CacheSpec local_spec;   // D's cache: where the runs' local ids point when direct
  kv::HeadRange heads;        // resolved: count is the number of heads moved

  // The staging buffer a staged pull reads into: P's geometry with just the moved heads,
  // num_staging_slots kernel blocks per region, regions one after another.
  kv::CacheSpec StagingSpec() const;
  uint64_t total_bytes() const;
  uint64_t num_descriptors() const;  // after coalescing (BuildDescriptors' count)
};

// Validates and plans. InvalidArgument when the specs are not re-layout compatible (dtype,
// heads, ...); OutOfRange when a remote id is beyond P's block count, a local id beyond D's, or
// either id list is too short for token_end (validated before anything is built).
StatusOr<PullPlan> PlanPull(const PullRequest& request);

// D's logical blocks that hold tokens [token_begin, token_end) (what a failed load reports).
std::vector<kv::LogicalBlockId> LocalBlocksForTokens(std::span<const kv::LogicalBlockId> ids,
                                                     int32_t block_size_logical,
                                                     int64_t token_begin, int64_t token_end);

// The descriptor lists of a plan, region by region, run by run: byte ranges from the specs
// (kv::CacheSpec::HeadSliceBytes of the run's kernel ids and the moved heads; whole blocks,
// KernelBlockBytes, when every head moves):
//   remote: (remote_regions[r], remote_spec's bytes of [remote_first, +count))
//   local direct: (local_regions[r], local_spec's bytes of [local_first, +count))
//   local staged: (local_regions[0], r * staging region bytes + StagingSpec()'s bytes of
//                  [local_first, +count))
// cut where either side is not contiguous and merged where both are.
struct DescriptorPair {
  transfer::DescriptorList local;
  transfer::DescriptorList remote;
};
DescriptorPair BuildDescriptors(const PullPlan& plan,
                                std::span<const transfer::RegionHandle> remote_regions,
                                std::span<const transfer::RegionHandle> local_regions);

}  // namespace kvferry::connector::internal
