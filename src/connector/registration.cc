#include "connector/registration.h"

#include <fmt/format.h>

#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {

std::string RankAgentName(const std::string& engine_id, int32_t rank, int32_t tp_size) {
  return tp_size == 1 ? engine_id : fmt::format("{}.tp{}", engine_id, rank);
}

Registration::Registration(const ConnectorContext* ctx,
                           std::vector<std::unique_ptr<transfer::Agent>> agents)
    : ctx_(ctx) {
  for (auto& agent : agents) {
    RankEndpoint rank;
    rank.agent = std::move(agent);
    ranks_.push_back(std::move(rank));
  }
}

Registration::~Registration() {
  BeginShutdown();
  // Before the lease table: its copies may be the agents' memory (MakeLeaseTable).
  for (RankEndpoint& rank : ranks_) {
    if (rank.cache_memory) rank.cache_memory->Detach();  // the cache's memory goes with the agent
    rank.agent.reset();
  }
}

int32_t Registration::engine_tp_size() const {
  return ctx_->options.engine_tp_size == 0 ? tp_size() : ctx_->options.engine_tp_size;
}

std::string Registration::AgentName(int32_t rank) const {
  return RankAgentName(ctx_->engine_id, EngineRank(rank), engine_tp_size());
}

std::map<std::string, uint64_t> Registration::RefusedInbound() const {
  std::map<std::string, uint64_t> sum;
  for (const RankEndpoint& r : ranks_) {
    if (r.agent == nullptr) continue;
    for (const auto& [reason, n] : r.agent->Stats().refused_inbound) sum[reason] += n;
  }
  return sum;
}

// Direct mode: the cache itself is what peers read, so it comes from the rank's agent (with
// UCX, shared memory a same-host D maps). Host-buffer mode: peers read the agent-allocated
// mirror instead, and the cache stays ordinary memory.
std::optional<kv::CacheMemory> Registration::CacheMemoryFor(int32_t r) {
  const KvTransferConfig& config = ctx_->config;
  if (config.use_host_buffer() || !config.cache_in_agent_memory || shut_down_ || r < 0 ||
      r >= tp_size()) {
    return std::nullopt;
  }
  RankEndpoint& rank = ranks_[r];
  if (rank.cache_memory == nullptr) {
    rank.cache_memory = std::make_shared<AgentCacheMemory>(
        rank.agent.get(), fmt::format("connector {} rank {}", ctx_->engine_id, r));
  }
  return rank.cache_memory->Hooks();
}

Status Registration::Register(std::span<kv::KvCache* const> caches,
                              const kv::HeadSharding& sharding, int32_t block_size_logical) {
  if (shut_down_) return FailedPreconditionError("connector is shut down");
  if (registered_) return FailedPreconditionError("RegisterKvCaches called twice");
  if (caches.size() != ranks_.size() || sharding.tp_size() != engine_tp_size()) {
    return InvalidArgumentError(fmt::format(
        "the connector has {} of the engine's {} tensor-parallel ranks (FerryConnectorOptions), "
        "the engine registered {} caches sharded over {}",
        ranks_.size(), engine_tp_size(), caches.size(), sharding.tp_size()));
  }
  sharding_ = sharding;
  for (int32_t r = 0; r < tp_size(); ++r) KVF_RETURN_IF_ERROR(RegisterRank(r, caches[r]));
  const kv::CacheSpec& spec = ranks_[0].spec;
  KVF_ASSIGN_OR_RETURN(kv::BlockGeometry geometry,
                       kv::BlockGeometry::Create(block_size_logical, spec.block_size_kernel));
  geometry_ = geometry;
  block_size_logical_ = block_size_logical;
  // The hash names the model's KV heads: instances at other TP sizes hold other counts per rank.
  kv::CacheSpec model = spec;
  model.num_kv_heads = sharding.num_kv_heads();
  compat_hash_ = CompatibilityHash(ctx_->options.model_name, model);
  KVF_RETURN_IF_ERROR(
      MakeLeaseTable(spec.num_blocks_kernel / geometry.kernel_blocks_per_logical()));
  registered_ = true;
  return Status::Ok();
}

Status Registration::RegisterRank(int32_t r, kv::KvCache* cache) {
  if (cache == nullptr) return InvalidArgumentError("RegisterKvCaches: null cache");
  RankEndpoint& rank = ranks_[r];
  // Geometry from the allocated memory, never from configuration (the seed's lesson).
  KVF_ASSIGN_OR_RETURN(rank.spec, kv::GeometryOf(*cache));
  if (rank.spec.num_kv_heads != sharding_.HeadsPerRank() ||
      (r > 0 && (rank.spec.block_size_kernel != ranks_[0].spec.block_size_kernel ||
                 rank.spec.num_blocks_kernel != ranks_[0].spec.num_blocks_kernel ||
                 !kv::CheckRelayoutCompatible(rank.spec, ranks_[0].spec).ok() ||
                 rank.spec.layout != ranks_[0].spec.layout))) {
    return InvalidArgumentError(fmt::format(
        "RegisterKvCaches: rank {}'s cache ({} KV heads, kernel block {}, {} blocks) does not "
        "match rank 0's geometry with {} KV heads per rank",
        r, rank.spec.num_kv_heads, rank.spec.block_size_kernel, rank.spec.num_blocks_kernel,
        sharding_.HeadsPerRank()));
  }
  rank.cache = cache;
  if (!ctx_->config.use_host_buffer()) return RegisterCacheRegions(r, cache);
  // The cache stays unregistered. P mirrors it, kernel block for kernel block, in a registered
  // host buffer of the same geometry; D pulls into per-load staging instead.
  if (ctx_->config.kv_role == KvRole::kConsumer) return Status::Ok();
  // Allocated by the agent: with UCX, shared memory that a D on this host maps, so its pull is
  // one memcpy (docs/transfer.md, "Mapped regions"). Freed with the agent.
  for (int32_t i = 0; i < rank.spec.num_regions(); ++i) {
    KVF_ASSIGN_OR_RETURN(transfer::AllocatedMemory m,
                         rank.agent->AllocateMemory(rank.spec.region_bytes()));
    rank.host_regions.push_back(static_cast<std::byte*>(m.addr));
    rank.local_regions.push_back(m.region);
  }
  return Status::Ok();
}

// Direct mode: each region is what peers read; those the agent allocated are registered already.
Status Registration::RegisterCacheRegions(int32_t r, kv::KvCache* cache) {
  RankEndpoint& rank = ranks_[r];
  int32_t from_agent = 0;
  for (int32_t i = 0; i < cache->num_regions(); ++i) {
    kv::RegionView v = cache->region(i);
    if (auto own = rank.cache_memory ? rank.cache_memory->RegionOf(v.base) : std::nullopt) {
      rank.local_regions.push_back(*own);
      ++from_agent;
      continue;
    }
    KVF_ASSIGN_OR_RETURN(
        transfer::RegionHandle h,
        rank.agent->RegisterMemory(v.base, v.size_bytes, transfer::MemoryKind::kHost));
    rank.local_regions.push_back(h);
  }
  KVF_LOG_INFO("connector {} rank {}: KV cache of {} regions, {} allocated by the transfer agent",
               ctx_->engine_id, r, cache->num_regions(), from_agent);
  return Status::Ok();
}

// The generation table, one copy per rank. When nothing the agents registered belongs to the
// engine (host-buffer mode, or a cache allocated through CacheMemoryFor), the agents can live
// until the destructor, and the copies are theirs: a same-host D maps them, and its generation
// check is a memcpy too. Otherwise the copies are the table's, registered as user memory.
Status Registration::MakeLeaseTable(int32_t num_blocks_logical) {
  agents_outlive_shutdown_ = ctx_->config.use_host_buffer();
  if (!agents_outlive_shutdown_) {
    agents_outlive_shutdown_ = true;
    for (RankEndpoint& rank : ranks_) {
      for (int32_t i = 0; i < rank.cache->num_regions(); ++i) {
        agents_outlive_shutdown_ &=
            rank.cache_memory != nullptr && rank.cache_memory->RegionOf(rank.cache->region(i).base);
      }
    }
  }
  const uint64_t bytes = static_cast<uint64_t>(num_blocks_logical) * sizeof(uint64_t);
  if (!agents_outlive_shutdown_) {
    leases_ = std::make_unique<LeaseTable>(num_blocks_logical, tp_size());
    for (int32_t r = 0; r < tp_size(); ++r) {
      KVF_ASSIGN_OR_RETURN(ranks_[r].generation_region,
                           ranks_[r].agent->RegisterMemory(leases_->generations_data(r), bytes,
                                                           transfer::MemoryKind::kHost));
    }
    return Status::Ok();
  }
  std::vector<uint64_t*> copies;
  for (RankEndpoint& rank : ranks_) {
    KVF_ASSIGN_OR_RETURN(transfer::AllocatedMemory m, rank.agent->AllocateMemory(bytes));
    rank.generation_region = m.region;
    copies.push_back(static_cast<uint64_t*>(m.addr));
  }
  leases_ = std::make_unique<LeaseTable>(num_blocks_logical, std::move(copies));
  return Status::Ok();
}

HandshakeMetadata Registration::MetadataOf(int32_t r, std::string agent_blob) const {
  const RankEndpoint& rank = ranks_[r];
  const bool host_buffer = ctx_->config.use_host_buffer();
  HandshakeMetadata meta;
  meta.engine_id = ctx_->engine_id;
  meta.tp_rank = EngineRank(r);
  meta.tp_size = engine_tp_size();
  meta.block_size_logical = block_size_logical_;
  meta.block_size_kernel = rank.spec.block_size_kernel;
  meta.layout = rank.spec.layout;
  meta.dtype = rank.spec.dtype;
  meta.kind = rank.spec.kind;
  meta.num_layers = rank.spec.num_layers;
  meta.num_kv_heads = rank.spec.num_kv_heads;
  meta.head_dim = rank.spec.head_dim;
  meta.num_blocks_kernel = rank.spec.num_blocks_kernel;
  meta.host_buffer = host_buffer;
  for (int32_t i = 0; i < rank.spec.num_regions(); ++i) {
    const uint64_t base = host_buffer ? reinterpret_cast<uint64_t>(rank.host_regions[i])
                                      : reinterpret_cast<uint64_t>(rank.cache->region(i).base);
    meta.regions.push_back({rank.local_regions[i].id, base, rank.spec.region_bytes(),
                            rank.spec.bytes_per_kernel_block()});
  }
  meta.generation_table = {rank.generation_region.id,
                           reinterpret_cast<uint64_t>(leases_->generations_data(r)),
                           leases_->generations_size_bytes(), 0};
  meta.agent_metadata = std::move(agent_blob);
  return meta;
}

Status Registration::StartServing(std::function<std::string(std::string_view)> handler) {
  std::vector<HandshakeMetadata> metas;
  for (int32_t r = 0; r < tp_size(); ++r) {
    KVF_ASSIGN_OR_RETURN(std::string blob, ranks_[r].agent->GetLocalMetadata());
    metas.push_back(MetadataOf(r, std::move(blob)));
  }
  handshake_reply_ = EncodeHandshakeReply(compat_hash_, metas);
  const KvTransferConfig& config = ctx_->config;
  KVF_ASSIGN_OR_RETURN(server_,
                       SideChannelServer::Start(config.side_channel_host, config.side_channel_port,
                                                std::move(handler), ctx_->keys.server()));
  server_port_.store(server_->port());
  LogServing();
  return Status::Ok();
}

void Registration::LogServing() const {
  const KvTransferConfig& config = ctx_->config;
  const kv::CacheSpec& spec = ranks_[0].spec;
  KVF_LOG_INFO(
      "connector {}: serving KV metadata on {}:{} ({} TP rank(s) of {} regions, kernel block {} "
      "tokens, logical {}, {}{}, {})",
      ctx_->engine_id, config.side_channel_host, server_->port(),
      tp_size() == engine_tp_size() ? std::to_string(tp_size())
                                    : fmt::format("ranks {}-{} of {}", first_rank(),
                                                  EngineRank(tp_size() - 1), engine_tp_size()),
      spec.num_regions(), spec.block_size_kernel, block_size_logical_, kv::LayoutName(spec.layout),
      config.use_host_buffer() ? ", host buffer" : "", ctx_->keys.curve() ? "CURVE" : "plaintext");
  if (!ctx_->keys.curve() && !IsLoopbackHost(config.side_channel_host)) {
    KVF_LOG_WARN(
        "connector {}: the side channel on {} is neither encrypted nor authenticated; anyone "
        "who reaches it can read this instance's KV metadata (configure CURVE, "
        "docs/deploy.md)",
        ctx_->engine_id, config.side_channel_host);
  }
}

void Registration::BeginShutdown() {
  shut_down_ = true;
  if (server_ != nullptr) server_->Stop();
}

void Registration::ReleaseAgents() {
  if (agents_outlive_shutdown_) return;
  for (RankEndpoint& rank : ranks_) {
    if (rank.cache_memory) rank.cache_memory->Detach();
    rank.agent.reset();
  }
}

}  // namespace kvferry::connector::internal
