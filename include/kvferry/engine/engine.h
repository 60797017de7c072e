// Engine: a small, real, batch-invariant CPU inference engine (docs/engine.md).
//
// One Engine owns a model (built-in or checkpoint), its paged KV cache (kv::KvCache laid out in
// kernel blocks), a block pool in logical blocks, a scheduler (continuous batching under a token
// budget, chunked prefill, prefix caching, preemption by recompute, remote KV loads through a
// connector) and a sampler.
//
// Usage (one engine thread):
//   KVF_ASSIGN_OR_RETURN(auto engine, Engine::Create(config));
//   KVF_RETURN_IF_ERROR(engine->AddRequest("r1", engine->tokenizer().Encode("hi"), params));
//   while (engine->HasWork()) for (auto& out : engine->Step()) { ... }
//
// Determinism contract: the logits of a token depend only on the model and the token's sequence
// (its prefix), never on batch composition, chunking, kernel block size, layout or thread
// count; sampling with a seed depends only on (seed, token index). Hence a request's tokens and
// logprobs are identical colocated, disaggregated, alone or batched (docs/engine.md).
//
// Thread-safety: NOT thread-safe. Every method must be called from one thread (the server's
// engine thread). The engine runs its own worker threads inside Step() only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/engine/model_config.h"
#include "kvferry/engine/request_output.h"
#include "kvferry/engine/sampling_params.h"
#include "kvferry/kv/block_events.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv_offload/disk_tier.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::engine {

// What to do with a request whose remote KV load failed: the connector contract's policy
// (connector.h), one type for both layers; kFail finishes it with FinishReason::kError.
using connector::KvLoadFailurePolicy;

struct EngineConfig {
  std::string model =
      "tiny";  // built-in ("tiny", "small", "tiny-odd", "tiny-kv4") or checkpoint path
  // The tokenizer: "" the model's own (docs/models.md); a path to a directory (or file) with a
  // Hugging Face tokenizer.json; or "byte-level", kvferry's byte vocabulary (vLLM's --tokenizer).
  std::string tokenizer;
  int32_t block_size = 16;  // LOGICAL block size in tokens (scheduler, prefix cache, wire)
  std::string attention_backend = "paged";  // "flash" (kernel 16/32/64) | "paged" (x16)
  kv::Layout kv_cache_layout = kv::Layout::kNHD;
  kv::DType kv_cache_dtype = kv::DType::kF32;
  int32_t num_kv_blocks = 0;                   // logical blocks; 0: from the memory budget
  int64_t kv_cache_memory_bytes = 64ll << 20;  // used when num_kv_blocks == 0
  // Disk tier (docs/kv_offload.md): with a directory, every full block the prefix cache takes is
  // also written there (at most kv_offload_bytes of files, least recently used evicted) and a
  // prompt's blocks found there are read back instead of computed; the files outlive the
  // process. Needs enable_prefix_caching.
  std::string kv_offload_dir;
  int64_t kv_offload_bytes = 0;
  int32_t max_num_batched_tokens = 256;  // token budget of one Step()
  int32_t max_num_seqs = 64;             // running requests at most
  int32_t max_model_len = 0;             // 0: the model's max_position
  int32_t num_threads = 2;               // kernel threads per TP rank (>= 1)
  // Tensor-parallel ranks (vLLM's --tensor-parallel-size): each owns a shard of the attention
  // heads and MLP columns and its own KV cache (its KV heads), and runs on its own thread; the
  // output is bit-identical for every allowed size (docs/engine.md, "Tensor parallelism").
  // kv_cache_memory_bytes is per rank.
  int32_t tensor_parallel_size = 1;
  bool enable_prefix_caching = true;
  // Mixed into the root of every prefix-cache chain hash with the model's identity: instances
  // of one model with one seed give a prompt's blocks the same hashes (the cluster keeps one
  // seed; docs/kv_events.md). 0 is a seed like any other.
  uint64_t prefix_hash_seed = 0;
  // Record the prefix cache's block events for TakeKvEvents() (docs/kv_events.md).
  bool record_kv_events = false;
  uint64_t seed = 0;  // seeds unseeded requests (see SamplingParams)
  // Optional connector (docs/engine.md, "Connector hooks"). Not owned; must outlive the engine.
  // Both or neither. Null: colocated. Create() calls connector_worker->RegisterKvCaches() with
  // every rank's cache.
  connector::ConnectorScheduler* connector_scheduler = nullptr;
  connector::ConnectorWorker* connector_worker = nullptr;
  KvLoadFailurePolicy kv_load_failure_policy = KvLoadFailurePolicy::kRecompute;
};

// What P and D compare (with the KV cache's shape) to know they serve the same model: a
// built-in's name, or the model directory's / file's name without its extension (so the same
// checkpoint under different parent paths matches).
std::string ModelIdentity(const std::string& model);

class Engine {
 public:
  // Builds the model, allocates the KV cache (kernel block size selected by the attention
  // backend for `block_size`), registers it with the connector. InvalidArgument / NotFound
  // naming the bad field (unknown model, unsupported block size, ...).
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. InvalidArgument for: empty prompt, a prompt CheckPrompt refuses
  // (prompt_limits.h: token id out of vocab, prompt of max_model_len tokens or more), bad
  // sampling params; AlreadyExists for a live request id.
  // kv_transfer_params are handed to the connector (ignored without one). Params with
  // do_remote_prefill and a first token (P's, kv_transfer_params.first_token_id) make the request
  // resume from it: the token is reported in the next Step()'s outputs as generated (it may
  // already finish the request), and sampling continues with P's sampling_seed at output index
  // 1 — with or without a connector, the output equals a colocated run's. A first token outside
  // the vocabulary is InvalidArgument.
  Status AddRequest(std::string request_id, std::vector<int32_t> prompt_token_ids,
                    const SamplingParams& params,
                    std::optional<connector::KvTransferParams> kv_transfer_params = std::nullopt);

  // One scheduler step: schedule under the token budget, run the forward pass, sample, poll the
  // connector. Returns the outputs of requests that advanced or finished. Cheap when there is
  // nothing to compute (then it only polls the connector).
  std::vector<RequestOutput> Step();

  // Aborts a request: its blocks are freed, and the next Step() reports it finished with kAbort.
  // NotFound when no live request has that id.
  Status Abort(std::string_view request_id);

  // True while a request is unfinished, an output (e.g. an abort) is not yet reported, or blocks
  // are held for a remote reader: keep calling Step().
  bool HasWork() const;
  // True while some request can compute (not only waiting for transfers); when HasWork() but not
  // this, the caller should sleep briefly between Step()s.
  bool HasComputableWork() const;

  EngineStats stats() const;
  // The prefix cache's block events since the last call, oldest first (record_kv_events), and
  // the salt its chain hashes start from (kv::HashBlockTokens).
  std::vector<kv::BlockEvent> TakeKvEvents();
  // The disk tier's counters; nullopt without one.
  std::optional<kv_offload::DiskTierStats> kv_offload_stats() const;
  uint64_t prefix_hash_salt() const;
  const EngineConfig& config() const;
  const ModelConfig& model_config() const;
  const tokenizer::Tokenizer& tokenizer() const;
  int32_t max_model_len() const;
  int32_t block_size_logical() const;
  int32_t block_size_kernel() const;
  // The logical -> kernel mapping of this engine's cache.
  const kv::BlockGeometry& geometry() const;
  // The allocated cache of a tensor-parallel rank (its KV heads only); its spec is the real
  // geometry.
  kv::KvCache* kv_cache(int32_t rank = 0);
  int32_t tensor_parallel_size() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvferry::engine
