// Micro-benchmarks of the kv layer: the logical -> kernel mapping and the re-layout.
//
// Re-layout benchmarks time, in every iteration, the re-layout of a token range AND a plain
// memcpy of the same number of bytes between two contiguous buffers, so the ceiling is measured
// in the same run under the same noise. Counters:
//   relayout_GBps  bytes moved by the re-layout per second
//   memcpy_GBps    the same bytes by one memcpy per second
//   ratio          relayout_GBps / memcpy_GBps (1.0 = as fast as memcpy)
// Run: build/bin/kv_bench [--benchmark_filter=Relayout]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_table.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::kv {
namespace {

void BM_KernelBlocksOf(benchmark::State& state) {
  const BlockGeometry g = *BlockGeometry::Create(128, 64);
  int64_t sum = 0;
  for (auto _ : state) {
    for (int32_t l = 0; l < 1024; ++l) {
      for (KernelBlockId k : g.KernelBlocksOf(LogicalBlockId(l))) sum += k.value();
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_KernelBlocksOf);

void BM_ExpandBlockTable(benchmark::State& state) {
  const BlockGeometry g = *BlockGeometry::Create(128, static_cast<int32_t>(state.range(0)));
  std::vector<LogicalBlockId> logical;
  for (int32_t l = 0; l < 1024; ++l) logical.emplace_back((l * 7919) % 4096);
  std::vector<KernelBlockId> kernel;
  for (auto _ : state) {
    g.ExpandBlockTableInto(logical, &kernel);
    benchmark::DoNotOptimize(kernel.data());
  }
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_ExpandBlockTable)->Arg(64)->Arg(16);

void BM_KernelSlotOfToken(benchmark::State& state) {
  BlockTable table(*BlockGeometry::Create(128, 64));
  for (int32_t l = 0; l < 64; ++l) table.Append(LogicalBlockId(63 - l));
  int64_t sum = 0;
  for (auto _ : state) {
    for (int64_t t = 0; t < table.capacity_tokens(); t += 7) {
      sum += table.KernelSlotOfToken(t)->block.value();
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * (table.capacity_tokens() / 7));
}
BENCHMARK(BM_KernelSlotOfToken);

constexpr int64_t kTokens = 2048;

CacheSpec BenchSpec(int32_t block_size_kernel, Layout layout) {
  CacheSpec s;
  s.num_layers = 2;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.dtype = DType::kBF16;
  s.layout = layout;
  s.block_size_kernel = block_size_kernel;
  s.num_blocks_kernel = static_cast<int32_t>(kTokens / block_size_kernel);
  return s;
}

// A shuffled block table, as a real cache would hand out.
std::vector<KernelBlockId> Table(const CacheSpec& s, uint32_t seed) {
  std::vector<int32_t> ids(s.num_blocks_kernel);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  std::vector<KernelBlockId> out;
  for (int32_t id : ids) out.emplace_back(id);
  return out;
}

// args: src kernel size, src layout, dst kernel size, dst layout, reference (0 fast / 1 slow)
void BM_Relayout(benchmark::State& state) {
  const CacheSpec ss =
      BenchSpec(static_cast<int32_t>(state.range(0)), static_cast<Layout>(state.range(1)));
  const CacheSpec ds =
      BenchSpec(static_cast<int32_t>(state.range(2)), static_cast<Layout>(state.range(3)));
  const bool reference = state.range(4) != 0;
  auto src = std::move(KvCache::Allocate(ss)).value();
  auto dst = std::move(KvCache::Allocate(ds)).value();
  for (int32_t r = 0; r < src->num_regions(); ++r) {
    std::memset(src->region(r).base, r + 1, src->region(r).size_bytes);
  }
  const std::vector<KernelBlockId> st = Table(ss, 1);
  const std::vector<KernelBlockId> dt = Table(ds, 2);
  const KvSourceView sv = SourceViewOf(*src, st);
  const KvDestView dv = DestViewOf(*dst, dt);
  const size_t bytes = static_cast<size_t>(kTokens) * ss.bytes_per_token_slot() * ss.num_regions();
  std::vector<std::byte> flat_src(bytes, std::byte{1});
  std::vector<std::byte> flat_dst(bytes);

  using Clock = std::chrono::steady_clock;
  double relayout_s = 0;
  double memcpy_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::memcpy(flat_dst.data(), flat_src.data(), bytes);
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    const Status s = reference ? RelayoutTokensReference(sv, dv, 0, kTokens)
                               : RelayoutTokens(sv, dv, 0, kTokens);
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    memcpy_s += std::chrono::duration<double>(t1 - t0).count();
    const double r = std::chrono::duration<double>(t2 - t1).count();
    relayout_s += r;
    state.SetIterationTime(r);
  }
  const double total = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  const double relayout_gbps = relayout_s > 0 ? total / relayout_s / 1e9 : 0;
  const double memcpy_gbps = memcpy_s > 0 ? total / memcpy_s / 1e9 : 0;
  state.SetBytesProcessed(static_cast<int64_t>(total));
  state.counters["relayout_GBps"] = relayout_gbps;
  state.counters["memcpy_GBps"] = memcpy_gbps;
  state.counters["ratio"] = memcpy_gbps > 0 ? relayout_gbps / memcpy_gbps : 0;
}

constexpr int64_t kNHD = static_cast<int64_t>(Layout::kNHD);
constexpr int64_t kHND = static_cast<int64_t>(Layout::kHND);

BENCHMARK(BM_Relayout)
    ->ArgNames({"src_bs", "src_layout", "dst_bs", "dst_layout", "reference"})
    ->Args({64, kNHD, 64, kNHD, 0})  // equal geometry: whole blocks
    ->Args({64, kHND, 64, kHND, 0})
    ->Args({128, kNHD, 64, kNHD, 0})  // kernel size differs: token-slot runs
    ->Args({64, kHND, 16, kHND, 0})   // per-head runs
    ->Args({64, kNHD, 16, kHND, 0})   // transpose
    ->Args({64, kHND, 128, kNHD, 0})
    ->Args({64, kNHD, 16, kHND, 1})  // the per-token reference, for scale
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvferry::kv

BENCHMARK_MAIN();
