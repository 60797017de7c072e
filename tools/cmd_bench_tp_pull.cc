// `kvferry bench tp-pull`: P/D pull time across tensor-parallel sizes (docs/benchmarks.md,
// "P/D across TP sizes"). For each (P TP, D TP) pair the model allows, a P engine and a D engine
// with real FerryConnectors in this process (UCX by default: shared memory between the agents)
// hand the same prompt over `--reps` times; each pull's time (post to checked, from D's
// connector), bytes and descriptors — in total and per D rank — are reported, and each
// heterogeneous pair's median beside the equal-TP pair at D's size (the ceiling it is held to:
// the same bytes for D's ranks, each from one P rank).
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/command_registry.h"
#include "tools/pull_pair.h"

namespace {

using namespace kvferry;

using tools::BenchPair;
using tools::PairResult;

struct TpPullOptions : tools::PullOptions {
  std::vector<int> tp_sizes = {1, 2, 4};
  bool json = false;
};

void Print(const PairResult& r, const PairResult* equal) {
  std::printf("pull P tp %d -> D tp %d: %9.1f us median, %9llu bytes, %6llu descriptors", r.p_tp,
              r.d_tp, r.Median(), static_cast<unsigned long long>(r.last.bytes),
              static_cast<unsigned long long>(r.last.descriptors));
  if (equal != nullptr && equal != &r && equal->Median() > 0) {
    std::printf("  x%.2f of tp %d -> %d", r.Median() / equal->Median(), equal->p_tp, equal->d_tp);
  }
  std::printf(
      "\n    %llu of the bytes by memcpy from P's mapped memory; cold memcpy of the same "
      "bytes %.1f us: the pull at %.2fx memcpy speed\n",
      static_cast<unsigned long long>(r.last.bytes_by_memcpy), r.cold_memcpy_us,
      r.Median() > 0 ? r.cold_memcpy_us / r.Median() : 0.0);
  for (const connector::RankLoad& rank : r.last.ranks) {
    std::string sources;
    for (int32_t s : rank.source_ranks) sources += (sources.empty() ? "" : ",") + std::to_string(s);
    std::printf("    D rank %d <- P rank(s) %-5s %9llu bytes %6llu descriptors\n", rank.rank,
                sources.c_str(), static_cast<unsigned long long>(rank.bytes),
                static_cast<unsigned long long>(rank.descriptors));
  }
  std::fflush(stdout);
}

int RunTpPull(const TpPullOptions& o) {
  std::vector<PairResult> results;
  std::map<int, size_t> equal;  // D tp -> index of the (tp, tp) pair
  // Equal pairs first: they are what the others are compared with.
  std::vector<std::pair<int, int>> pairs;
  for (int t : o.tp_sizes) pairs.push_back({t, t});
  for (int a : o.tp_sizes)
    for (int b : o.tp_sizes)
      if (a != b) pairs.push_back({a, b});
  for (auto [a, b] : pairs) {
    StatusOr<PairResult> r = BenchPair(o, a, b);
    if (!r.ok()) {
      std::fprintf(stderr, "pull P tp %d -> D tp %d: %s\n", a, b, r.status().ToString().c_str());
      continue;  // a TP size the model does not allow, say
    }
    if (a == b) equal[b] = results.size();
    results.push_back(std::move(*r));
    if (!o.json) {
      auto it = equal.find(b);
      Print(results.back(), it == equal.end() ? nullptr : &results[it->second]);
    }
  }
  if (!o.json) return results.empty() ? 1 : 0;
  nlohmann::json j = {{"model", o.model},
                      {"prompt_len", o.prompt_len},
                      {"two_process", o.two_process},
                      {"heap_cache", o.heap_cache},
                      {"block_size", o.block_size},
                      {"layout", o.layout},
                      {"backend", o.backend},
                      {"pairs", nlohmann::json::array()}};
  for (const PairResult& r : results) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const connector::RankLoad& rank : r.last.ranks) {
      ranks.push_back({{"rank", rank.rank},
                       {"source_ranks", rank.source_ranks},
                       {"bytes", rank.bytes},
                       {"descriptors", rank.descriptors}});
    }
    nlohmann::json row = {{"p_tp", r.p_tp},          {"d_tp", r.d_tp},
                          {"median_us", r.Median()}, {"pull_us", r.pull_us},
                          {"bytes", r.last.bytes},   {"descriptors", r.last.descriptors},
                          {"ranks", ranks}};
    row["bytes_by_memcpy"] = r.last.bytes_by_memcpy;
    row["cold_memcpy_us"] = r.cold_memcpy_us;
    row["ratio_vs_cold_memcpy"] = r.Median() > 0 ? r.cold_memcpy_us / r.Median() : 0.0;
    auto it = equal.find(r.d_tp);
    if (it != equal.end()) row["ratio_to_equal_tp"] = r.Median() / results[it->second].Median();
    j["pairs"].push_back(row);
  }
  std::printf("%s\n", j.dump(2).c_str());
  return results.empty() ? 1 : 0;
}

void AddBenchTpPull(CLI::App& app) {
  CLI::App* bench = kvferry::tools::BenchGroup(app);
  auto o = std::make_shared<TpPullOptions>();
  auto* sub = bench->add_subcommand(
      "tp-pull", "P/D pull time, bytes and descriptors across tensor-parallel sizes");
  sub->add_option("--model", o->model, "Built-in model")->capture_default_str();
  sub->add_option("--prompt-len", o->prompt_len, "Prompt tokens")->capture_default_str();
  sub->add_option("--reps", o->reps, "Timed pulls per pair")->capture_default_str();
  sub->add_option("--block-size", o->block_size, "Logical block size (both sides)")
      ->capture_default_str();
  sub->add_option("--attention-backend", o->attention_backend, "flash or paged")
      ->capture_default_str();
  sub->add_option("--kv-cache-layout", o->layout, "NHD or HND (both sides)")->capture_default_str();
  sub->add_option("--backend", o->backend, "Transfer backend: ucx, socket or loopback")
      ->capture_default_str();
  sub->add_option("--tensor-parallel-sizes", o->tp_sizes, "TP sizes, paired every way")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_flag("--host-buffer", o->host_buffer,
                "kv_buffer_device cpu on both sides (P serves agent-allocated memory; with UCX a "
                "same-host D maps it and pulls with one memcpy)");
  sub->add_flag("--two-process", o->two_process,
                "P in a forked child process, as between two serving instances on this host");
  sub->add_flag("--heap-cache", o->heap_cache,
                "Caches from the heap (cache_in_agent_memory false): registered user memory, "
                "not mapped by a same-host peer, for comparison");
  sub->add_flag("--json", o->json, "Print JSON instead of a table");
  sub->callback([o] { throw CLI::RuntimeError(RunTpPull(*o)); });
}
KVF_REGISTER_COMMAND(AddBenchTpPull);

}  // namespace
