// `kvferry bench tp-pull`: P/D pull time across tensor-parallel sizes (docs/benchmarks.md,
// "P/D across TP sizes"). For each (P TP, D TP) pair the model allows, a P engine and a D engine
// with real FerryConnectors in this process (UCX by default: shared memory between the agents)
// hand the same prompt over `--reps` times; each pull's time (post to checked, from D's
// connector), bytes and descriptors — in total and per D rank — are reported, and each
// heterogeneous pair's median beside the equal-TP pair at D's size (the ceiling it is held to:
// the same bytes for D's ranks, each from one P rank).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/connector/ferry_connector.h"
#include "kvferry/engine/engine.h"
#include "tools/command_registry.h"

namespace {

using namespace kvferry;

struct PullOptions {
  std::string model = "tiny-kv4";
  int prompt_len = 2048;
  int reps = 5;
  int block_size = 16;
  std::string attention_backend = "flash";
  std::string layout = "HND";
  std::string backend = "ucx";
  std::vector<int> tp_sizes = {1, 2, 4};
  bool host_buffer = false;
  bool json = false;
};

struct Instance {
  std::unique_ptr<connector::FerryConnector> connector;
  std::unique_ptr<engine::Engine> engine;
};

StatusOr<Instance> MakeInstance(const PullOptions& o, const std::string& id, int tp, bool is_p) {
  connector::KvTransferConfig kv;
  kv.engine_id = id;
  if (o.host_buffer) kv.kv_buffer_device = "cpu";
  KVF_ASSIGN_OR_RETURN(kv.backend, transfer::ParseBackendKind(o.backend));
  Instance inst;
  KVF_ASSIGN_OR_RETURN(inst.connector,
                       connector::CreateFerryConnector(
                           kv, {.model_name = engine::ModelIdentity(o.model), .tp_size = tp}));
  engine::EngineConfig ec;
  ec.model = o.model;
  ec.tensor_parallel_size = tp;
  ec.num_threads = 1;
  ec.block_size = o.block_size;
  ec.attention_backend = o.attention_backend;
  KVF_ASSIGN_OR_RETURN(ec.kv_cache_layout, kv::ParseLayout(o.layout));
  ec.num_kv_blocks = (o.prompt_len + o.block_size - 1) / o.block_size * 2 + 8;
  ec.max_num_batched_tokens = 1024;
  // D pulls every time (no prefix hit); P serves its repeats from its prefix cache.
  ec.enable_prefix_caching = is_p;
  ec.connector_scheduler = inst.connector->scheduler();
  ec.connector_worker = inst.connector->worker();
  KVF_ASSIGN_OR_RETURN(inst.engine, engine::Engine::Create(ec));
  return inst;
}

// Steps the engines until `id` finished on `watch` (and, with `until_idle`, none has work left:
// P has let go of the blocks); the final output of `id`.
StatusOr<engine::RequestOutput> Run(const std::vector<engine::Engine*>& engines,
                                    engine::Engine* watch, const std::string& id, bool until_idle) {
  const Deadline deadline = Deadline::AfterMs(120000);
  std::optional<engine::RequestOutput> done;
  while (!deadline.Expired()) {
    bool work = false;
    for (engine::Engine* e : engines) {
      if (!e->HasWork()) continue;
      work = true;
      for (engine::RequestOutput& out : e->Step()) {
        if (e == watch && out.request_id == id && out.finished) done = std::move(out);
      }
    }
    if (done.has_value() && (!work || !until_idle)) return *done;
    if (!work) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return DeadlineExceededError("request " + id + " did not finish");
}

struct PairResult {
  int p_tp = 1, d_tp = 1;
  std::vector<double> pull_us;
  connector::LoadReport last;
  double Median() const {
    std::vector<double> v = pull_us;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

StatusOr<PairResult> BenchPair(const PullOptions& o, int p_tp, int d_tp) {
  const std::string tag = std::to_string(p_tp) + "-" + std::to_string(d_tp);
  KVF_ASSIGN_OR_RETURN(Instance p, MakeInstance(o, "bench-p-" + tag, p_tp, true));
  KVF_ASSIGN_OR_RETURN(Instance d, MakeInstance(o, "bench-d-" + tag, d_tp, false));
  std::vector<int32_t> prompt = {256};
  for (int i = 1; i < o.prompt_len; ++i) prompt.push_back(32 + (i * 7) % 95);
  engine::SamplingParams sp;
  sp.max_tokens = 1;
  sp.ignore_eos = true;
  // D resumes after P's first token: asked for that one token alone it would finish without a
  // pull, so it is asked for two (one decode step after the pull).
  engine::SamplingParams d_sp = sp;
  d_sp.max_tokens = 2;
  PairResult r{p_tp, d_tp, {}, {}};
  for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0: handshake and warm-up, not timed
    const std::string id = "r" + std::to_string(rep);
    connector::KvTransferParams to_p;
    to_p.do_remote_decode = true;
    KVF_RETURN_IF_ERROR(p.engine->AddRequest(id, prompt, sp, to_p));
    KVF_ASSIGN_OR_RETURN(engine::RequestOutput prefilled,
                         Run({p.engine.get()}, p.engine.get(), id, false));
    if (!prefilled.kv_transfer_params) return InternalError("P returned no kv_transfer_params");
    const uint64_t before = d.connector->Stats().duration_us_total;
    KVF_RETURN_IF_ERROR(d.engine->AddRequest(id, prompt, d_sp, *prefilled.kv_transfer_params));
    KVF_ASSIGN_OR_RETURN(engine::RequestOutput out,
                         Run({d.engine.get(), p.engine.get()}, d.engine.get(), id, true));
    if (!out.kv_load || out.kv_load->outcome != connector::LoadOutcome::kPulled) {
      return InternalError("the KV was not pulled (" +
                           std::string(out.kv_load
                                           ? connector::LoadOutcomeName(out.kv_load->outcome)
                                           : "no report") +
                           ")");
    }
    if (rep > 0) {
      r.pull_us.push_back(static_cast<double>(d.connector->Stats().duration_us_total - before));
    }
    r.last = *out.kv_load;
  }
  d.connector->worker()->Shutdown();
  p.connector->worker()->Shutdown();
  return r;
}

void Print(const PairResult& r, const PairResult* equal) {
  std::printf("pull P tp %d -> D tp %d: %9.1f us median, %9llu bytes, %6llu descriptors", r.p_tp,
              r.d_tp, r.Median(), static_cast<unsigned long long>(r.last.bytes),
              static_cast<unsigned long long>(r.last.descriptors));
  if (equal != nullptr && equal != &r && equal->Median() > 0) {
    std::printf("  x%.2f of tp %d -> %d", r.Median() / equal->Median(), equal->p_tp, equal->d_tp);
  }
  std::printf("\n");
  for (const connector::RankLoad& rank : r.last.ranks) {
    std::string sources;
    for (int32_t s : rank.source_ranks) sources += (sources.empty() ? "" : ",") + std::to_string(s);
    std::printf("    D rank %d <- P rank(s) %-5s %9llu bytes %6llu descriptors\n", rank.rank,
                sources.c_str(), static_cast<unsigned long long>(rank.bytes),
                static_cast<unsigned long long>(rank.descriptors));
  }
  std::fflush(stdout);
}

int RunTpPull(const PullOptions& o) {
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
  nlohmann::json j = {{"model", o.model},           {"prompt_len", o.prompt_len},
                      {"block_size", o.block_size}, {"layout", o.layout},
                      {"backend", o.backend},       {"pairs", nlohmann::json::array()}};
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
    auto it = equal.find(r.d_tp);
    if (it != equal.end()) row["ratio_to_equal_tp"] = r.Median() / results[it->second].Median();
    j["pairs"].push_back(row);
  }
  std::printf("%s\n", j.dump(2).c_str());
  return results.empty() ? 1 : 0;
}

void AddBenchTpPull(CLI::App& app) {
  CLI::App* bench = nullptr;
  try {
    bench = app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
  }
  auto o = std::make_shared<PullOptions>();
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
  sub->add_flag("--json", o->json, "Print JSON instead of a table");
  sub->callback([o] { throw CLI::RuntimeError(RunTpPull(*o)); });
}
KVF_REGISTER_COMMAND(AddBenchTpPull);

}  // namespace
