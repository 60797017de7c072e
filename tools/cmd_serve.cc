// `kvferry serve`: an OpenAI-compatible server over one engine (docs/serving.md). The flags
// follow `vllm serve` where a vLLM user would look for them.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "kvferry/common/logging.h"
#include "kvferry/connector/kv_transfer_config.h"
#include "kvferry/engine/engine.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/dtype.h"
#include "kvferry/kv_events/events_config.h"
#include "kvferry/server/engine_loop.h"
#include "kvferry/server/openai_server.h"
#include "tools/cluster_flags.h"
#include "tools/command_registry.h"
#include "tools/security_flags.h"
#include "tools/stop_signal.h"

namespace {

struct ServeOptions {
  std::string model = "tiny";
  std::string tokenizer;
  std::string chat_template;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  int block_size = 16;
  std::string attention_backend = "paged";
  std::string kv_cache_layout = "NHD";
  std::string kv_cache_dtype = "f32";
  int num_kv_blocks = 0;
  int kv_cache_memory_mb = 64;
  int max_num_batched_tokens = 256;
  int max_num_seqs = 64;
  int max_model_len = 0;
  int threads = 2;
  int tensor_parallel_size = 1;
  long long seed = 0;
  bool no_prefix_caching = false;
  std::string kv_transfer_config;
  std::string kv_events_config;
  unsigned long long prefix_hash_seed = 0;
  std::string kv_offload_dir;
  double kv_offload_gb = 0;
  int request_timeout_s = 600;
  int shutdown_timeout_s = 10;
  kvferry::tools::SecurityFlags security;
  kvferry::tools::ServeRegistryFlags registry;
};

int Fail(const std::string& what, const kvferry::Status& s) {
  std::fprintf(stderr, "kvferry serve: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 2;
}

// The engine loop the flags describe: 0, or the exit status after printing the bad flag.
int EngineLoopOptionsFrom(const ServeOptions& o, kvferry::server::EngineLoopOptions* loop_opts) {
  using namespace kvferry;
  engine::EngineConfig& c = loop_opts->engine;
  c.model = o.model;
  c.tokenizer = o.tokenizer;
  c.block_size = o.block_size;
  c.attention_backend = o.attention_backend;
  auto layout = kv::ParseLayout(o.kv_cache_layout);
  if (!layout.ok()) return Fail("--kv-cache-layout", layout.status());
  c.kv_cache_layout = *layout;
  auto dtype = kv::ParseDType(o.kv_cache_dtype);
  if (!dtype.ok()) return Fail("--kv-cache-dtype", dtype.status());
  c.kv_cache_dtype = *dtype;
  c.num_kv_blocks = o.num_kv_blocks;
  c.kv_cache_memory_bytes = static_cast<int64_t>(o.kv_cache_memory_mb) << 20;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_num_seqs = o.max_num_seqs;
  c.max_model_len = o.max_model_len;
  c.num_threads = o.threads;
  c.tensor_parallel_size = o.tensor_parallel_size;
  c.enable_prefix_caching = !o.no_prefix_caching;
  c.seed = static_cast<uint64_t>(o.seed);
  c.prefix_hash_seed = o.prefix_hash_seed;
  if (!o.kv_offload_dir.empty() && !(o.kv_offload_gb > 0)) {
    return Fail("--kv-offload-gb",
                kvferry::InvalidArgumentError("a capacity > 0 is needed with --kv-offload-dir"));
  }
  if (o.kv_offload_dir.empty() && o.kv_offload_gb != 0) {
    return Fail("--kv-offload-gb", kvferry::InvalidArgumentError("needs --kv-offload-dir"));
  }
  c.kv_offload_dir = o.kv_offload_dir;
  c.kv_offload_bytes = static_cast<int64_t>(o.kv_offload_gb * double(1 << 30));
  auto events =
      kv_events::ParseKvEventsConfig(o.kv_events_config.empty() ? "{}" : o.kv_events_config);
  if (!events.ok()) return Fail("--kv-events-config", events.status());
  loop_opts->kv_events = *events;
  if (!o.kv_transfer_config.empty()) {
    auto kv = connector::ParseKvTransferConfig(o.kv_transfer_config);
    if (!kv.ok()) return Fail("--kv-transfer-config", kv.status());
    loop_opts->kv_transfer = *kv;
  }
  return 0;
}

// The HTTP server the flags describe: 0, or the exit status after printing the bad flag.
int ServerOptionsFrom(const ServeOptions& o, kvferry::server::ServerOptions* sopts) {
  sopts->host = o.host;
  sopts->port = o.port;
  sopts->served_model_name = o.served_model_name.empty() ? o.model : o.served_model_name;
  sopts->max_connections = o.security.max_connections;
  sopts->request_read_timeout_ms = kvferry::tools::RequestReadTimeoutMsOf(o.security);
  sopts->chat_template = o.chat_template;
  sopts->request_timeout_ms = static_cast<int64_t>(o.request_timeout_s) * 1000;
  auto api_keys = kvferry::tools::ApiKeyOptionsOf(o.security);
  if (!api_keys.ok()) return Fail("--api-key", api_keys.status());
  sopts->api_keys = *api_keys;
  sopts->tls = kvferry::tools::TlsFilesOf(o.security);
  return 0;
}

// The startup log's role: colocated, or the kv_role with the engine id and side channel.
std::string DescribeRole(const kvferry::server::EngineLoopOptions& loop_opts,
                         const kvferry::server::EngineLoop& loop) {
  if (!loop_opts.kv_transfer) return "colocated";
  return std::string(kvferry::connector::KvRoleName(loop_opts.kv_transfer->kv_role)) +
         ", engine_id " + loop.engine_id() + ", side channel " +
         loop_opts.kv_transfer->side_channel_host + ":" + std::to_string(loop.side_channel_port());
}

// Waits for SIGINT/SIGTERM or the engine loop's end; returns the signal (0: the engine).
int WaitForStop(const kvferry::server::EngineLoop& loop) {
  int sig = 0;
  while ((sig = kvferry::tools::StopSignal()) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!loop.healthy()) {
      KVF_LOG_ERROR("engine loop stopped; exiting");
      break;
    }
  }
  return sig;
}

int RunServe(const ServeOptions& o) {
  using namespace kvferry;
  server::EngineLoopOptions loop_opts;
  if (int rc = EngineLoopOptionsFrom(o, &loop_opts); rc != 0) return rc;

  kvferry::tools::InstallStopHandlers();

  server::ServerMetrics metrics;
  auto loop = server::EngineLoop::Start(loop_opts, &metrics);
  if (!loop.ok()) return Fail("engine", loop.status());

  server::ServerOptions sopts;
  if (int rc = ServerOptionsFrom(o, &sopts); rc != 0) return rc;
  server::OpenAiServer http(sopts, loop->get(), &metrics);
  Status started = http.Start();
  if (!started.ok()) return Fail("http", started);
  KVF_LOG_INFO("kvferry serve: {}://{}:{} model {} ({}), max_model_len {}; {}",
               sopts.tls.enabled() ? "https" : "http", o.host, http.port(), sopts.served_model_name,
               DescribeRole(loop_opts, **loop), (*loop)->max_model_len(),
               kvferry::tools::DescribeSecurity(sopts.api_keys, sopts.tls));
  if (!(*loop)->kv_events_endpoint().empty()) {
    KVF_LOG_INFO("kvferry serve: KV events on {}, replay {}", (*loop)->kv_events_endpoint(),
                 (*loop)->kv_events_replay_endpoint().empty()
                     ? std::string("off")
                     : (*loop)->kv_events_replay_endpoint());
  }
  auto registrar = kvferry::tools::StartServeRegistration(
      o.registry,
      {&loop_opts, loop->get(), o.host, http.port(), sopts.tls.enabled(), sopts.served_model_name});
  if (!registrar.ok()) return Fail("--registry", registrar.status());

  const int sig = WaitForStop(**loop);
  KVF_LOG_INFO("kvferry serve: {}, draining (up to {} s)", sig > 0 ? strsignal(sig) : "engine down",
               o.shutdown_timeout_s);
  if (*registrar) (*registrar)->Stop();  // leave the cluster first: no new requests come
  http.BeginDrain();
  (*loop)->Stop(static_cast<int64_t>(o.shutdown_timeout_s) * 1000);
  http.Stop();
  KVF_LOG_INFO("kvferry serve: stopped");
  return 0;
}

void AddServe(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (docs/serving.md)");
  sub->add_option("--model", o->model,
                  "Built-in (tiny, small, tiny-odd, tiny-kv4, tiny-mla, tiny-moe, tiny-mla-moe), a "
                  "Hugging Face model "
                  "directory or a .gguf "
                  "file (docs/models.md); also the served model name")
      ->capture_default_str();
  sub->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer: a directory with tokenizer.json, or byte-level (default: the "
                  "model's own)");
  sub->add_option("--chat-template", o->chat_template,
                  "Chat template: a Jinja file or the template text (default: the model's own)");
  sub->add_option("--served-model-name", o->served_model_name,
                  "Model name clients send and /v1/models reports (default: --model)");
  sub->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "HTTP port (0: any free port)")->capture_default_str();
  sub->add_option("--block-size", o->block_size,
                  "Logical KV block size in tokens (scheduler, prefix cache, kv_transfer_params); "
                  "the kernel block size is chosen by the attention backend")
      ->capture_default_str();
  sub->add_option("--attention-backend", o->attention_backend,
                  "flash (kernel blocks 16/32/64: --block-size 128 gives kernel 64) or paged "
                  "(any multiple of 16)")
      ->capture_default_str();
  sub->add_option("--kv-cache-layout", o->kv_cache_layout,
                  "KV tensor layout: NHD ([block][token][head][dim]) or HND")
      ->capture_default_str();
  sub->add_option("--kv-cache-dtype", o->kv_cache_dtype, "KV storage dtype: f32, f16, bf16")
      ->capture_default_str();
  sub->add_option("--num-kv-blocks", o->num_kv_blocks,
                  "Logical KV blocks to allocate (0: from --kv-cache-memory-mb)")
      ->capture_default_str();
  sub->add_option("--kv-cache-memory-mb", o->kv_cache_memory_mb,
                  "KV cache budget in MiB when --num-kv-blocks is 0")
      ->capture_default_str();
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens,
                  "Token budget of one engine step (longer prefills are chunked)")
      ->capture_default_str();
  sub->add_option("--max-num-seqs", o->max_num_seqs, "Running requests at most")
      ->capture_default_str();
  sub->add_option("--max-model-len", o->max_model_len,
                  "Longest sequence, prompt + output (0: the model's maximum)")
      ->capture_default_str();
  sub->add_option("--threads", o->threads,
                  "Kernel threads per tensor-parallel rank (outputs do not depend on it)")
      ->capture_default_str();
  sub->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "Tensor-parallel ranks (-tp, as vLLM): threads each owning a shard of the heads "
                  "and MLP and its own KV cache; outputs do not depend on it (docs/engine.md)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", o->seed, "Engine seed for requests without their own")
      ->capture_default_str();
  sub->add_flag("--no-enable-prefix-caching", o->no_prefix_caching, "Disable the prefix cache");
  sub->add_option("--kv-transfer-config", o->kv_transfer_config,
                  "JSON enabling P/D transfer, vLLM's fields: kv_connector (FerryConnector), "
                  "kv_role (kv_producer|kv_consumer|kv_both), kv_buffer_device (cpu: host "
                  "buffer), engine_id, kv_load_failure_policy (recompute|fail), "
                  "kv_connector_extra_config {side_channel_host, side_channel_port, lease_ms, "
                  "handshake_timeout_ms, transfer_timeout_ms, backend (ucx|socket|loopback), "
                  "auth_token, curve_secret_key_file, curve_client_keys_file, "
                  "curve_server_keys_file}");
  sub->add_option("--kv-events-config", o->kv_events_config,
                  "JSON publishing the prefix cache's block events over ZeroMQ in vLLM's format "
                  "(docs/kv_events.md), vLLM's fields: enable_kv_cache_events, publisher (zmq), "
                  "endpoint (tcp://HOST:PORT, bound; port 0: any free port), replay_endpoint, "
                  "buffer_steps, hwm, max_queue_size, topic");
  sub->add_option("--prefix-hash-seed", o->prefix_hash_seed,
                  "Seed of the prefix cache's block hashes: instances of one model with one seed "
                  "give equal prompts equal hashes (one per cluster; docs/kv_events.md)")
      ->capture_default_str();
  sub->add_option("--kv-offload-dir", o->kv_offload_dir,
                  "Disk tier (docs/kv_offload.md): every full KV block is also written to a "
                  "checksummed file here and read back on a prefix hit, also after a restart");
  sub->add_option("--kv-offload-gb", o->kv_offload_gb,
                  "The disk tier's capacity in GiB (fractions allowed; least recently used "
                  "files go first)");
  sub->add_option("--request-timeout", o->request_timeout_s, "A request's whole life, seconds")
      ->capture_default_str();
  kvferry::tools::AddSecurityFlags(sub, &o->security);
  sub->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "On SIGTERM/SIGINT, seconds to let running requests finish before aborting")
      ->capture_default_str();
  kvferry::tools::AddServeRegistryFlags(sub, &o->registry);
  sub->callback([o] { throw CLI::RuntimeError(RunServe(*o)); });
}
KVF_REGISTER_COMMAND(AddServe);

}  // namespace
