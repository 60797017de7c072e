// The connector's own cost per request: planning a pull (PlanPull: logical ids -> kernel ids ->
// coalesced runs, validated) and building its descriptor lists (BuildDescriptors), for 4k- and
// 32k-token prompts in each mode, on the `small` model's cache shape (8 layers -> 16 regions,
// 4 KV heads x 64, f32):
//   direct        P and D of the same geometry (kernel 64, NHD): P kernel block -> D kernel block
//   staged_block  P logical 128 / kernel 64 -> D logical 32 / kernel 32 (staging + re-layout)
//   staged_layout P NHD -> D HND, same block sizes
//   fragmented    direct, but the pool handed out scattered blocks (no run longer than 1)
// The Time column is the cost per request; items_per_second counts prompt tokens planned (linear
// in blocks when 4k and 32k show the same rate); descriptors is the count per pull. The goal is
// <= 20 us per 4k-token request (vLLM's connector spends ~3 ms there, vllm#23780).
// Run: build/bin/connector_plan_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "connector/transfer_plan.h"

namespace kvferry::connector::internal {
namespace {

using kv::Layout;
using kv::LogicalBlockId;

SideGeometry Side(int32_t logical, int32_t kernel, Layout layout, int32_t tokens_capacity) {
  SideGeometry g;
  g.spec.num_layers = 8;
  g.spec.num_kv_heads = 4;
  g.spec.head_dim = 64;
  g.spec.dtype = kv::DType::kF32;
  g.spec.layout = layout;
  g.spec.block_size_kernel = kernel;
  g.spec.num_blocks_kernel = tokens_capacity / kernel;
  g.block_size_logical = logical;
  return g;
}

// `n` logical ids out of a pool of `pool`: consecutive (a fresh pool) or shuffled (a busy one).
std::vector<LogicalBlockId> Ids(int32_t n, int32_t pool, bool scattered, uint32_t seed) {
  std::vector<int32_t> all(pool);
  std::iota(all.begin(), all.end(), 0);
  if (scattered) std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  std::vector<LogicalBlockId> out;
  for (int32_t i = 0; i < n; ++i) out.emplace_back(all[i]);
  return out;
}

enum Mode { kDirect, kStagedBlock, kStagedLayout, kFragmented };

void BM_PlanAndDescriptors(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const Mode mode = static_cast<Mode>(state.range(1));
  const int32_t capacity = 65536;
  const SideGeometry p = Side(128, 64, Layout::kNHD, capacity);
  const SideGeometry d = mode == kStagedBlock    ? Side(32, 32, Layout::kNHD, capacity)
                         : mode == kStagedLayout ? Side(128, 64, Layout::kHND, capacity)
                                                 : Side(128, 64, Layout::kNHD, capacity);
  const bool scattered = mode == kFragmented;
  const auto remote = Ids(static_cast<int32_t>((tokens + 127) / 128), capacity / 128, scattered, 1);
  const int32_t d_logical = d.block_size_logical;
  const auto local = Ids(static_cast<int32_t>((tokens + d_logical - 1) / d_logical),
                         capacity / d_logical, scattered, 2);
  std::vector<transfer::RegionHandle> regions;
  for (uint32_t r = 0; r < 16; ++r) regions.push_back({r});
  uint64_t descriptors = 0;
  for (auto _ : state) {
    PullRequest req{p, d, true, remote, local, 0, tokens - 1, {}};
    StatusOr<PullPlan> plan = PlanPull(req);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    DescriptorPair desc = BuildDescriptors(*plan, regions, regions);
    descriptors = desc.remote.size();
    benchmark::DoNotOptimize(desc.local.data());
  }
  state.SetItemsProcessed(state.iterations() * tokens);  // tokens planned per second
  state.counters["descriptors"] = static_cast<double>(descriptors);
}

void Modes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "mode"});
  for (int64_t tokens : {4096, 32768}) {
    for (int mode : {kDirect, kStagedBlock, kStagedLayout, kFragmented}) b->Args({tokens, mode});
  }
}
BENCHMARK(BM_PlanAndDescriptors)->Apply(Modes);

}  // namespace
}  // namespace kvferry::connector::internal

BENCHMARK_MAIN();
