#include "kvferry/engine/engine.h"

#include <filesystem>
#include <functional>

#include "engine/kv_tier.h"
#include "engine/model/model_loader.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/tensor_parallel.h"
#include "engine/thread_pool.h"
#include "engine/tp_communicator.h"
#include "engine/weights.h"
#include "kvferry/engine/prompt_limits.h"
#include "kvferry/kv/attention_backend.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_pool.h"

namespace kvferry::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "none";
}

std::string ModelIdentity(const std::string& model) {
  if (BuiltinModelConfig(model).ok()) return model;
  std::filesystem::path p(model);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  const std::string ext = p.extension().string();
  return ext == ".gguf" || ext == ".safetensors" ? p.stem().string() : p.filename().string();
}

namespace {

// One tensor-parallel rank: its KV cache (its KV heads only), its weight shard, its kernel
// threads and its runner.
struct Rank {
  std::unique_ptr<kv::KvCache> cache;
  ModelShard shard;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ModelRunner> runner;
};

}  // namespace

struct Engine::Impl {
  EngineConfig config;
  ModelWeights weights;
  std::optional<tokenizer::Tokenizer> tokenizer;
  int32_t max_model_len = 0;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::unique_ptr<TpCommunicator> comm;
  std::unique_ptr<ThreadPool> rank_threads;  // one thread per rank (rank 0: the engine thread)
  std::unique_ptr<KvTier> tier;  // after ranks (it copies their caches), before the scheduler
  std::unique_ptr<Scheduler> scheduler;
  uint64_t next_seed = 0;
  int64_t num_steps = 0;
  std::vector<ForwardChunk> forward_chunks;
  std::vector<float> logits;
};

namespace {

// P's first token (kv_transfer_params.first_token_*) names tokens of this vocabulary.
Status CheckFirstToken(const connector::FirstToken& first, int32_t vocab) {
  auto outside = [vocab](int32_t id) { return id < 0 || id >= vocab; };
  bool bad = outside(first.token_id);
  for (const connector::FirstTokenAlternative& a : first.top_logprobs) bad |= outside(a.token_id);
  if (!bad) return Status::Ok();
  return InvalidArgumentError(
      "kv_transfer_params.first_token_id: token id outside the vocabulary [0, " +
      std::to_string(vocab) + ")");
}

Status ValidateConfig(const EngineConfig& c) {
  if (c.block_size <= 0) return InvalidArgumentError("block_size must be > 0");
  if (c.num_threads < 1) return InvalidArgumentError("num_threads must be >= 1");
  if (c.tensor_parallel_size < 1) {
    return InvalidArgumentError("tensor_parallel_size must be >= 1");
  }
  if (c.max_num_batched_tokens < 1)
    return InvalidArgumentError("max_num_batched_tokens must be >= 1");
  if (c.max_num_seqs < 1) return InvalidArgumentError("max_num_seqs must be >= 1");
  if (c.num_kv_blocks < 0) return InvalidArgumentError("num_kv_blocks must be >= 0");
  if (c.num_kv_blocks == 0 && c.kv_cache_memory_bytes <= 0) {
    return InvalidArgumentError("kv_cache_memory_bytes must be > 0 when num_kv_blocks is 0");
  }
  if (c.max_model_len < 0) return InvalidArgumentError("max_model_len must be >= 0");
  if ((c.connector_scheduler == nullptr) != (c.connector_worker == nullptr)) {
    return InvalidArgumentError("connector_scheduler and connector_worker: both or neither");
  }
  if (!c.kv_offload_dir.empty() && c.kv_offload_bytes <= 0) {
    return InvalidArgumentError("kv_offload_bytes must be > 0 with a kv_offload_dir");
  }
  if (!c.kv_offload_dir.empty() && !c.enable_prefix_caching) {
    return InvalidArgumentError("the disk tier (kv_offload_dir) needs prefix caching on");
  }
  return Status::Ok();
}

// The disk tier over the ranks' caches, or null without a directory.
StatusOr<std::unique_ptr<KvTier>> OpenKvTier(const EngineConfig& config,
                                             const kv::BlockGeometry& geometry, uint64_t salt,
                                             const std::vector<std::unique_ptr<Rank>>& ranks) {
  if (config.kv_offload_dir.empty()) return std::unique_ptr<KvTier>();
  std::vector<kv::KvCache*> caches;
  for (const auto& rank : ranks) caches.push_back(rank->cache.get());
  kv_offload::DiskTierOptions o;
  o.dir = config.kv_offload_dir;
  o.capacity_bytes = static_cast<uint64_t>(config.kv_offload_bytes);
  o.block_size = geometry.block_size_logical();
  o.salt = salt;
  o.layout = KvTier::LayoutKey(caches, geometry);
  o.record_events = config.record_kv_events;
  KVF_ASSIGN_OR_RETURN(std::unique_ptr<kv_offload::DiskTier> disk, kv_offload::DiskTier::Open(o));
  return std::make_unique<KvTier>(std::move(disk), std::move(caches), geometry);
}

// Every rank's cache: the same block geometry and count (one block pool addresses all of them),
// each with the rank's KV heads, in memory the KV connector supplies if it does. Returns the
// number of logical blocks; the memory budget is per rank (as vLLM's is per GPU).
StatusOr<int32_t> AllocateCaches(const EngineConfig& config, const ModelConfig& mc,
                                 const kv::BlockGeometry& geometry,
                                 const std::vector<RankShard>& shards,
                                 std::vector<std::unique_ptr<Rank>>* ranks) {
  if (config.kv_cache_layout != kv::Layout::kNHD && config.kv_cache_layout != kv::Layout::kHND) {
    return InvalidArgumentError("kv_cache_layout " +
                                std::string(kv::LayoutName(config.kv_cache_layout)) +
                                ": kvferry's attention kernels read NHD or HND (VLLM_CPU and "
                                "VLLM_CPU_AMX are vLLM's CPU layouts, which only the connector's "
                                "re-layout handles)");
  }
  kv::CacheSpec spec;
  spec.num_layers = mc.num_layers;
  spec.num_kv_heads = shards[0].num_kv_heads;
  // MLA: one region per layer, one row of [latent | rope key] per token (num_kv_heads is 1).
  spec.head_dim = mc.kv_cache_head_dim();
  spec.dtype = config.kv_cache_dtype;
  spec.kind = mc.is_mla() ? kv::AttentionKind::kMLA : kv::AttentionKind::kStandard;
  spec.mla_rope_dim = mc.is_mla() ? mc.mla.qk_rope_head_dim : 0;
  spec.layout = config.kv_cache_layout;
  spec.block_size_kernel = geometry.block_size_kernel();
  spec.num_blocks_kernel = 1;
  const int64_t bytes_per_logical = static_cast<int64_t>(spec.bytes_per_kernel_block()) *
                                    geometry.kernel_blocks_per_logical() * spec.num_regions();
  int64_t num_blocks = config.num_kv_blocks;
  if (num_blocks == 0) num_blocks = config.kv_cache_memory_bytes / bytes_per_logical;
  if (num_blocks < 1) {
    return InvalidArgumentError(
        "kv_cache_memory_bytes " + std::to_string(config.kv_cache_memory_bytes) +
        " is below one logical block (" + std::to_string(bytes_per_logical) + " bytes)");
  }
  if (num_blocks > (int64_t{1} << 30) / geometry.kernel_blocks_per_logical()) {
    return InvalidArgumentError("num_kv_blocks too large");
  }
  spec.num_blocks_kernel = geometry.KernelBlocksOfLogicalCount(static_cast<int32_t>(num_blocks));
  KVF_RETURN_IF_ERROR(spec.Validate());
  for (size_t r = 0; r < shards.size(); ++r) {
    auto rank = std::make_unique<Rank>();
    // The connector may supply the memory (its transfer agent's: one-copy same-host pulls).
    std::optional<kv::CacheMemory> memory;
    if (config.connector_worker != nullptr) {
      memory = config.connector_worker->CacheMemoryFor(static_cast<int32_t>(r));
    }
    KVF_ASSIGN_OR_RETURN(rank->cache, kv::KvCache::Allocate(spec, std::move(memory)));
    ranks->push_back(std::move(rank));
  }
  return static_cast<int32_t>(num_blocks);
}

// Each rank's weight shard, kernel threads and runner, the all-reduce that joins them, and one
// thread per rank to run them side by side.
void BuildRanks(const EngineConfig& config, const ModelWeights& weights, int32_t max_model_len,
                const std::vector<RankShard>& shards, TpCommunicator* comm,
                const std::vector<std::unique_ptr<Rank>>& ranks) {
  const auto rope = MakeRopeTable(weights.config, max_model_len);
  for (size_t r = 0; r < ranks.size(); ++r) {
    Rank& rank = *ranks[r];
    rank.shard = ShardWeights(weights, shards[r]);
    rank.pool = std::make_unique<ThreadPool>(config.num_threads);
    rank.runner =
        std::make_unique<ModelRunner>(&rank.shard, comm, rope, rank.cache.get(), rank.pool.get());
  }
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  KVF_RETURN_IF_ERROR(ValidateConfig(config));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->next_seed = config.seed;
  KVF_ASSIGN_OR_RETURN(Model model, LoadModel(config.model, config.tokenizer));
  impl->weights = std::move(model.weights);
  impl->tokenizer = std::move(model.tokenizer);
  const ModelConfig& mc = impl->weights.config;

  KVF_ASSIGN_OR_RETURN(const kv::AttentionBackend* backend,
                       kv::FindAttentionBackend(config.attention_backend));
  KVF_ASSIGN_OR_RETURN(int32_t block_size_kernel,
                       kv::SelectKernelBlockSize(config.block_size, *backend));
  KVF_ASSIGN_OR_RETURN(kv::BlockGeometry geometry,
                       kv::BlockGeometry::Create(config.block_size, block_size_kernel));

  impl->max_model_len = config.max_model_len > 0 ? config.max_model_len : mc.max_position;
  if (impl->max_model_len > mc.max_position) {
    return InvalidArgumentError("max_model_len " + std::to_string(impl->max_model_len) +
                                " exceeds the model's max_position " +
                                std::to_string(mc.max_position));
  }
  if (impl->max_model_len < 2) return InvalidArgumentError("max_model_len must be >= 2");

  KVF_RETURN_IF_ERROR(CheckQuantizedLeaves(impl->weights));
  KVF_ASSIGN_OR_RETURN(std::vector<RankShard> shards,
                       PlanTensorParallel(mc, config.tensor_parallel_size));
  KVF_ASSIGN_OR_RETURN(const int32_t num_blocks,
                       AllocateCaches(config, mc, geometry, shards, &impl->ranks));
  impl->comm = std::make_unique<TpCommunicator>(config.tensor_parallel_size);
  impl->rank_threads = std::make_unique<ThreadPool>(config.tensor_parallel_size);
  BuildRanks(config, impl->weights, impl->max_model_len, shards, impl->comm.get(), impl->ranks);

  kv::BlockPoolOptions pool_options;
  pool_options.num_blocks_logical = num_blocks;
  pool_options.block_size_logical = config.block_size;
  pool_options.hash_salt = std::hash<std::string>()(
      mc.name + "/" + std::to_string(mc.vocab_size) + "/" + std::to_string(mc.hidden_dim) + "/" +
      std::to_string(mc.num_layers) + "/" + std::to_string(mc.weight_seed) + "/" +
      std::to_string(config.prefix_hash_seed));
  pool_options.record_events = config.record_kv_events;
  KVF_ASSIGN_OR_RETURN(kv::BlockPool block_pool, kv::BlockPool::Create(pool_options));

  if (config.connector_worker != nullptr) {
    std::vector<kv::KvCache*> caches;
    for (const auto& rank : impl->ranks) caches.push_back(rank->cache.get());
    KVF_ASSIGN_OR_RETURN(kv::HeadSharding sharding,
                         kv::HeadSharding::Create(mc.num_kv_heads, config.tensor_parallel_size));
    KVF_RETURN_IF_ERROR(
        config.connector_worker->RegisterKvCaches(caches, sharding, config.block_size)
            .WithContext("connector RegisterKvCaches"));
  }
  SchedulerOptions so;
  so.max_num_batched_tokens = config.max_num_batched_tokens;
  so.max_num_seqs = config.max_num_seqs;
  so.max_model_len = impl->max_model_len;
  so.enable_prefix_caching = config.enable_prefix_caching;
  so.kv_load_failure_policy = config.kv_load_failure_policy;
  so.eos_token_ids = mc.eos_token_ids;
  KVF_ASSIGN_OR_RETURN(impl->tier,
                       OpenKvTier(config, geometry, pool_options.hash_salt, impl->ranks));
  impl->scheduler = std::make_unique<Scheduler>(so, std::move(block_pool), geometry,
                                                config.connector_scheduler, impl->tier.get());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::AddRequest(std::string request_id, std::vector<int32_t> prompt_token_ids,
                          const SamplingParams& params,
                          std::optional<connector::KvTransferParams> kv_transfer_params) {
  if (request_id.empty()) return InvalidArgumentError("request id must not be empty");
  if (prompt_token_ids.empty()) return InvalidArgumentError("prompt must not be empty");
  const int32_t vocab = impl_->weights.config.vocab_size;
  KVF_RETURN_IF_ERROR(CheckPrompt(prompt_token_ids, vocab, impl_->max_model_len));
  KVF_RETURN_IF_ERROR(params.Validate());
  if (impl_->scheduler->Contains(request_id)) {
    return AlreadyExistsError("request id '" + request_id + "' is already live");
  }
  // D resuming from P's first output token: it is appended as generated, and sampling goes on
  // with P's seed at output index 1 (docs/connector.md §2).
  std::optional<connector::FirstToken> first;
  if (kv_transfer_params && kv_transfer_params->do_remote_prefill) {
    first = kv_transfer_params->first_token;
  }
  if (first) KVF_RETURN_IF_ERROR(CheckFirstToken(*first, vocab));
  const uint64_t seed = first         ? first->sampling_seed
                        : params.seed ? *params.seed
                                      : impl_->next_seed++;
  auto request =
      std::make_unique<Request>(std::move(request_id), std::move(prompt_token_ids), params, seed,
                                std::move(kv_transfer_params), impl_->scheduler->geometry());
  request->first_output = std::move(first);
  impl_->scheduler->Add(std::move(request));
  return Status::Ok();
}

std::vector<RequestOutput> Engine::Step() {
  Impl& m = *impl_;
  ++m.num_steps;
  std::vector<ScheduledChunk> chunks = m.scheduler->Schedule();
  connector::ConnectorWorker* worker = m.config.connector_worker;
  if (worker != nullptr) {
    worker->BindMetadata(m.config.connector_scheduler->BuildConnectorMeta());
    worker->StartLoadKv();
  }
  if (!chunks.empty()) {
    m.forward_chunks.clear();
    for (const ScheduledChunk& c : chunks) {
      ForwardChunk fc;
      fc.tokens = std::span<const int32_t>(c.request->tokens.data() + c.first_pos, c.num_tokens);
      fc.first_pos = c.first_pos;
      fc.kernel_table = c.request->table.kernel_ids();
      fc.want_logits = c.completes;
      m.forward_chunks.push_back(fc);
    }
    m.logits.resize(
        static_cast<size_t>(NumLogitRows(m.forward_chunks) * m.weights.config.vocab_size));
    // Every rank at once (they meet in the all-reduce); each writes its vocab columns.
    m.rank_threads->RunOnEach(
        [&m](int32_t r) { m.ranks[r]->runner->Forward(m.forward_chunks, m.logits.data()); });
    m.scheduler->OnChunksComputed(chunks);
    const int32_t vocab = m.weights.config.vocab_size;
    int64_t row = 0;
    for (const ScheduledChunk& c : chunks) {
      if (!c.completes) continue;
      Request* r = c.request;
      SampleResult s =
          Sample(m.logits.data() + row * vocab, vocab, r->params, r->seed, r->num_output_tokens());
      ++row;
      m.scheduler->AppendToken(r, s.token_id, s.logprob, std::move(s.top_logprobs));
    }
  }
  if (worker != nullptr) {
    worker->AfterForward();
    const connector::ConnectorOutput out = worker->GetFinished();
    m.config.connector_scheduler->UpdateConnectorOutput(out);
    m.scheduler->UpdateFromConnector(out);
  }
  return m.scheduler->TakeOutputs();
}

Status Engine::Abort(std::string_view request_id) { return impl_->scheduler->Abort(request_id); }
bool Engine::HasWork() const { return impl_->scheduler->HasWork(); }
bool Engine::HasComputableWork() const { return impl_->scheduler->HasComputableWork(); }

std::vector<kv::BlockEvent> Engine::TakeKvEvents() {
  std::vector<kv::BlockEvent> events = impl_->scheduler->TakeKvEvents();
  if (impl_->tier) {
    std::vector<kv::BlockEvent> disk = impl_->tier->disk().TakeEvents();
    events.insert(events.end(), std::make_move_iterator(disk.begin()),
                  std::make_move_iterator(disk.end()));
  }
  return events;
}

std::optional<kv_offload::DiskTierStats> Engine::kv_offload_stats() const {
  if (!impl_->tier) return std::nullopt;
  return impl_->tier->disk().Stats();
}

uint64_t Engine::prefix_hash_salt() const { return impl_->scheduler->pool().hash_salt(); }

EngineStats Engine::stats() const {
  EngineStats s = impl_->scheduler->Stats();
  s.num_steps = impl_->num_steps;
  return s;
}
const EngineConfig& Engine::config() const { return impl_->config; }
const ModelConfig& Engine::model_config() const { return impl_->weights.config; }
const tokenizer::Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
int32_t Engine::max_model_len() const { return impl_->max_model_len; }
int32_t Engine::block_size_logical() const {
  return impl_->scheduler->geometry().block_size_logical();
}
int32_t Engine::block_size_kernel() const {
  return impl_->scheduler->geometry().block_size_kernel();
}
const kv::BlockGeometry& Engine::geometry() const { return impl_->scheduler->geometry(); }
kv::KvCache* Engine::kv_cache(int32_t rank) { return impl_->ranks[rank]->cache.get(); }
int32_t Engine::tensor_parallel_size() const { return impl_->config.tensor_parallel_size; }

}  // namespace kvferry::engine
