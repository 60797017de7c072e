// `kvferry bench mla-pull`: what multi-head latent attention saves in P/D (docs/benchmarks.md,
// "MLA against GQA"). For each model (default tiny-mla, and tiny-kv4: GQA at the same hidden size
// 128 and the same 2 layers), a P engine and a D engine at TP 1 with real FerryConnectors hand the
// same prompt over `--reps` times (tools/pull_pair.h); printed side by side: the KV cache bytes
// per token (in all, and per layer) computed from the model, the bytes each pull moved (checked
// equal to the prompt's P kernel blocks times that: the command fails otherwise), and the median
// pull time, with the ratios to the first model.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvferry/engine/engine.h"
#include "kvferry/engine/model_config.h"
#include "kvferry/kv/attention_backend.h"
#include "kvferry/kv/cache_spec.h"
#include "tools/command_registry.h"
#include "tools/pull_pair.h"

namespace {

using namespace kvferry;

struct MlaPullOptions : tools::PullOptions {
  std::vector<std::string> models = {"tiny-mla", "tiny-kv4"};
  bool json = false;
};

struct Row {
  std::string model;
  int64_t bytes_per_token = 0;  // KV cache, all layers (f32)
  int64_t layers = 0;
  tools::PairResult pull;
};

// What one token's KV costs in the cache: MLA one row of latent + rope key per layer; GQA K and
// V of every KV head per layer.
int64_t KvBytesPerToken(const engine::ModelConfig& m) {
  const int64_t per_layer =
      m.is_mla() ? m.kv_cache_head_dim() : int64_t{2} * m.num_kv_heads * m.kv_cache_head_dim();
  return per_layer * m.num_layers * static_cast<int64_t>(kv::DTypeBytes(kv::DType::kF32));
}

// A pull of the first `tokens` tokens reads P's kernel blocks covering them, whole.
uint64_t ExpectedPullBytes(const MlaPullOptions& o, int64_t bytes_per_token, int64_t tokens) {
  const kv::AttentionBackend* backend = kv::FindAttentionBackend(o.attention_backend).value();
  const int64_t kernel = kv::SelectKernelBlockSize(o.block_size, *backend).value();
  return static_cast<uint64_t>((tokens + kernel - 1) / kernel * kernel * bytes_per_token);
}

int RunMlaPull(const MlaPullOptions& o) {
  std::vector<Row> rows;
  for (const std::string& model : o.models) {
    StatusOr<engine::ModelConfig> config = engine::BuiltinModelConfig(model);
    if (!config.ok()) {
      std::fprintf(stderr, "%s: %s\n", model.c_str(), config.status().ToString().c_str());
      return 1;
    }
    tools::PullOptions po = o;
    po.model = model;
    StatusOr<tools::PairResult> r = tools::BenchPair(po, 1, 1);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", model.c_str(), r.status().ToString().c_str());
      return 1;
    }
    Row row{model, KvBytesPerToken(*config), config->num_layers, std::move(*r)};
    const uint64_t want = ExpectedPullBytes(o, row.bytes_per_token, row.pull.last.tokens);
    if (row.pull.last.bytes != want) {
      std::fprintf(stderr, "%s: pulled %llu bytes, the cache geometry says %llu\n", model.c_str(),
                   static_cast<unsigned long long>(row.pull.last.bytes),
                   static_cast<unsigned long long>(want));
      return 1;
    }
    rows.push_back(std::move(row));
  }
  if (o.json) {
    nlohmann::json j = {{"prompt_len", o.prompt_len},
                        {"block_size", o.block_size},
                        {"backend", o.backend},
                        {"models", nlohmann::json::array()}};
    for (const Row& r : rows) {
      j["models"].push_back({{"model", r.model},
                             {"kv_bytes_per_token", r.bytes_per_token},
                             {"kv_bytes_per_token_per_layer", r.bytes_per_token / r.layers},
                             {"pulled_bytes", r.pull.last.bytes},
                             {"pulled_tokens", r.pull.last.tokens},
                             {"descriptors", r.pull.last.descriptors},
                             {"median_us", r.pull.Median()},
                             {"pull_us", r.pull.pull_us}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-10s %12s %12s %14s %6s %12s %12s\n", "model", "KV B/token", "B/tok/layer",
              "pulled bytes", "descr", "pull us", "vs first");
  for (const Row& r : rows) {
    std::printf("%-10s %12lld %12lld %14llu %6llu %12.1f   bytes x%.3f, time x%.2f\n",
                r.model.c_str(), static_cast<long long>(r.bytes_per_token),
                static_cast<long long>(r.bytes_per_token / r.layers),
                static_cast<unsigned long long>(r.pull.last.bytes),
                static_cast<unsigned long long>(r.pull.last.descriptors), r.pull.Median(),
                static_cast<double>(r.pull.last.bytes) / rows[0].pull.last.bytes,
                r.pull.Median() / rows[0].pull.Median());
  }
  return 0;
}

void AddBenchMlaPull(CLI::App& app) {
  CLI::App* bench = kvferry::tools::BenchGroup(app);
  auto o = std::make_shared<MlaPullOptions>();
  o->layout = "NHD";
  auto* sub = bench->add_subcommand(
      "mla-pull", "KV bytes per token and P/D pull time, MLA against GQA, side by side");
  sub->add_option("--models", o->models, "Built-in models, compared with the first")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_option("--prompt-len", o->prompt_len, "Prompt tokens")->capture_default_str();
  sub->add_option("--reps", o->reps, "Timed pulls per model")->capture_default_str();
  sub->add_option("--block-size", o->block_size, "Logical block size (both sides)")
      ->capture_default_str();
  sub->add_option("--backend", o->backend, "Transfer backend: ucx, socket or loopback")
      ->capture_default_str();
  sub->add_flag("--host-buffer", o->host_buffer, "kv_buffer_device cpu on both sides");
  sub->add_flag("--json", o->json, "Print JSON instead of a table");
  sub->callback([o] { throw CLI::RuntimeError(RunMlaPull(*o)); });
}
KVF_REGISTER_COMMAND(AddBenchMlaPull);

}  // namespace
