// The factory, registration (every tensor-parallel rank's cache with its own agent) and side
// channel, the scheduler half, and the worker adapters. P's staging and leases are in
// producer.cc, D's pull path in recv_path.cc.
#include "kvferry/connector/ferry_connector.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector {
namespace internal {

namespace {

std::string RankAgentName(const std::string& engine_id, int32_t rank, int32_t tp_size) {
  return tp_size == 1 ? engine_id : fmt::format("{}.tp{}", engine_id, rank);
}

}  // namespace

FerryConnectorImpl::FerryConnectorImpl(const KvTransferConfig& config,
                                       const FerryConnectorOptions& options, std::string engine_id,
                                       std::vector<std::unique_ptr<transfer::Agent>> agents,
                                       SideChannelKeys keys)
    : config_(config), keys_(std::move(keys)), options_(options), engine_id_(std::move(engine_id)) {
  for (auto& agent : agents) {
    RankEndpoint rank;
    rank.agent = std::move(agent);
    ranks_.push_back(std::move(rank));
  }
  // Fault injection for the process-level fault tests (docs/reliability.md): widen the window
  // between a pull's data READ and its generation READ (which carries the notification), so a
  // test can kill P in it. Blocks the engine thread for that long; never set it in production.
  // KVFERRY_FAULT_DATA_READ_MARKER names a file that gets one line per completed data READ
  // before the pause, so the test acts inside the window instead of guessing when it opens.
  if (const char* env = std::getenv("KVFERRY_FAULT_PAUSE_AFTER_DATA_READ_MS")) {
    const int pause_ms = std::atoi(env);
    const char* marker = std::getenv("KVFERRY_FAULT_DATA_READ_MARKER");
    if (pause_ms > 0) {
      KVF_LOG_WARN("connector {}: fault injection: pausing {} ms after each data READ", engine_id_,
                   pause_ms);
      after_data_read_for_test =
          [pause_ms, path = std::string(marker ? marker : "")](const std::string& request_id) {
            if (!path.empty()) std::ofstream(path, std::ios::app) << request_id << "\n";
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
          };
    }
  }
}

FerryConnectorImpl::~FerryConnectorImpl() {
  Shutdown();
  // Before the lease table: its copies may be the agents' memory (MakeLeaseTable).
  for (RankEndpoint& rank : ranks_) {
    if (rank.cache_memory) rank.cache_memory->Detach();  // the cache's memory goes with the agent
    rank.agent.reset();
  }
}

ConnectorStats FerryConnectorImpl::Stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

std::string FerryConnectorImpl::AgentName(int32_t rank) const {
  return RankAgentName(engine_id_, rank, tp_size());
}

// ---------------------------------------------------------------------------------------------
// Registration and the side channel.

Status FerryConnectorImpl::Register(std::span<kv::KvCache* const> caches,
                                    const kv::HeadSharding& sharding, int32_t block_size_logical) {
  if (registered_) return FailedPreconditionError("RegisterKvCaches called twice");
  if (caches.size() != ranks_.size() || sharding.tp_size() != tp_size()) {
    return InvalidArgumentError(fmt::format(
        "the connector has {} tensor-parallel ranks (FerryConnectorOptions::tp_size), the "
        "engine registered {} caches sharded over {}",
        ranks_.size(), caches.size(), sharding.tp_size()));
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
  compat_hash_ = CompatibilityHash(options_.model_name, model);
  KVF_RETURN_IF_ERROR(
      MakeLeaseTable(spec.num_blocks_kernel / geometry.kernel_blocks_per_logical()));
  registered_ = true;
  if (config_.kv_role == KvRole::kConsumer) return Status::Ok();
  return StartServing(block_size_logical);
}

// Direct mode: the cache itself is what peers read, so it comes from the rank's agent (with
// UCX, shared memory a same-host D maps). Host-buffer mode: peers read the agent-allocated
// mirror instead, and the cache stays ordinary memory.
std::optional<kv::CacheMemory> FerryConnectorImpl::CacheMemoryFor(int32_t r) {
  if (config_.use_host_buffer() || !config_.cache_in_agent_memory || shut_down_ || r < 0 ||
      r >= tp_size()) {
    return std::nullopt;
  }
  RankEndpoint& rank = ranks_[r];
  if (rank.cache_memory == nullptr) {
    rank.cache_memory = std::make_shared<AgentCacheMemory>(
        rank.agent.get(), fmt::format("connector {} rank {}", engine_id_, r));
  }
  return rank.cache_memory->Hooks();
}

Status FerryConnectorImpl::RegisterRank(int32_t r, kv::KvCache* cache) {
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
  if (config_.use_host_buffer()) {
    // The cache stays unregistered. P mirrors it, kernel block for kernel block, in a
    // registered host buffer of the same geometry; D pulls into per-load staging instead.
    if (config_.kv_role == KvRole::kConsumer) return Status::Ok();
    // Allocated by the agent: with UCX, shared memory that a D on this host maps, so its
    // pull is one memcpy (docs/transfer.md, "Mapped regions"). Freed with the agent.
    for (int32_t i = 0; i < rank.spec.num_regions(); ++i) {
      KVF_ASSIGN_OR_RETURN(transfer::AllocatedMemory m,
                           rank.agent->AllocateMemory(rank.spec.region_bytes()));
      rank.host_regions.push_back(static_cast<std::byte*>(m.addr));
      rank.local_regions.push_back(m.region);
    }
    return Status::Ok();
  }
  int32_t from_agent = 0;
  for (int32_t i = 0; i < cache->num_regions(); ++i) {
    kv::RegionView v = cache->region(i);
    if (auto own = rank.cache_memory ? rank.cache_memory->RegionOf(v.base) : std::nullopt) {
      rank.local_regions.push_back(*own);  // allocated, hence registered, by the agent
      ++from_agent;
      continue;
    }
    KVF_ASSIGN_OR_RETURN(
        transfer::RegionHandle h,
        rank.agent->RegisterMemory(v.base, v.size_bytes, transfer::MemoryKind::kHost));
    rank.local_regions.push_back(h);
  }
  KVF_LOG_INFO("connector {} rank {}: KV cache of {} regions, {} allocated by the transfer agent",
               engine_id_, r, cache->num_regions(), from_agent);
  return Status::Ok();
}

// The generation table, one copy per rank. When nothing the agents registered belongs to the
// engine (host-buffer mode, or a cache allocated through CacheMemoryFor), the agents can live
// until the destructor, and the copies are theirs: a same-host D maps them, and its generation
// check is a memcpy too. Otherwise the copies are the table's, registered as user memory.
Status FerryConnectorImpl::MakeLeaseTable(int32_t num_blocks_logical) {
  agents_outlive_shutdown_ = config_.use_host_buffer();
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

// P: every rank's metadata in one pre-encoded reply, and the side channel that serves it.
Status FerryConnectorImpl::StartServing(int32_t block_size_logical) {
  std::vector<HandshakeMetadata> metas;
  for (int32_t r = 0; r < tp_size(); ++r) {
    const RankEndpoint& rank = ranks_[r];
    KVF_ASSIGN_OR_RETURN(std::string blob, rank.agent->GetLocalMetadata());
    HandshakeMetadata meta;
    meta.engine_id = engine_id_;
    meta.tp_rank = r;
    meta.tp_size = tp_size();
    meta.block_size_logical = block_size_logical;
    meta.block_size_kernel = rank.spec.block_size_kernel;
    meta.layout = rank.spec.layout;
    meta.dtype = rank.spec.dtype;
    meta.kind = rank.spec.kind;
    meta.num_layers = rank.spec.num_layers;
    meta.num_kv_heads = rank.spec.num_kv_heads;
    meta.head_dim = rank.spec.head_dim;
    meta.num_blocks_kernel = rank.spec.num_blocks_kernel;
    meta.host_buffer = config_.use_host_buffer();
    for (int32_t i = 0; i < rank.spec.num_regions(); ++i) {
      const uint64_t base = config_.use_host_buffer()
                                ? reinterpret_cast<uint64_t>(rank.host_regions[i])
                                : reinterpret_cast<uint64_t>(rank.cache->region(i).base);
      meta.regions.push_back({rank.local_regions[i].id, base, rank.spec.region_bytes(),
                              rank.spec.bytes_per_kernel_block()});
    }
    meta.generation_table = {rank.generation_region.id,
                             reinterpret_cast<uint64_t>(leases_->generations_data(r)),
                             leases_->generations_size_bytes(), 0};
    meta.agent_metadata = std::move(blob);
    metas.push_back(std::move(meta));
  }
  handshake_reply_ = EncodeHandshakeReply(compat_hash_, metas);
  KVF_ASSIGN_OR_RETURN(server_, SideChannelServer::Start(
                                    config_.side_channel_host, config_.side_channel_port,
                                    [this](std::string_view req) { return HandleSideChannel(req); },
                                    keys_.server()));
  server_port_.store(server_->port());
  const kv::CacheSpec& spec = ranks_[0].spec;
  KVF_LOG_INFO(
      "connector {}: serving KV metadata on {}:{} ({} TP rank(s) of {} regions, kernel block {} "
      "tokens, logical {}, {}{}, {})",
      engine_id_, config_.side_channel_host, server_->port(), tp_size(), spec.num_regions(),
      spec.block_size_kernel, block_size_logical, kv::LayoutName(spec.layout),
      config_.use_host_buffer() ? ", host buffer" : "", keys_.curve() ? "CURVE" : "plaintext");
  if (!keys_.curve() && !IsLoopbackHost(config_.side_channel_host)) {
    KVF_LOG_WARN(
        "connector {}: the side channel on {} is neither encrypted nor authenticated; anyone "
        "who reaches it can read this instance's KV metadata (configure CURVE, "
        "docs/deploy.md)",
        engine_id_, config_.side_channel_host);
  }
  return Status::Ok();
}

bool FerryConnectorImpl::TokenMatches(const std::string& presented) const {
  const std::string& want = config_.auth_token;
  if (want.empty()) return true;
  // Constant-time comparison: the token's bytes are not revealed by timing.
  unsigned char diff = want.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(want[i] ^ (i < presented.size() ? presented[i] : 0));
  }
  return diff == 0;
}

std::string FerryConnectorImpl::HandleSideChannel(std::string_view request) {
  StatusOr<HandshakeRequest> req = DecodeHandshakeRequest(request);
  if (!req.ok()) {
    if (StatusOr<ReleaseRequest> rel = DecodeReleaseRequest(request); rel.ok()) {
      if (!TokenMatches(rel->auth_token)) return EncodeHandshakeError("bad auth token");
      MutexLock lock(&released_mu_);
      released_.push_back(std::move(rel->request_id));
      return EncodeOk();
    }
    KVF_LOG_WARN("connector {}: rejected side-channel message: {}", engine_id_,
                 req.status().ToString());
    return EncodeHandshakeError(fmt::format("malformed request: {}", req.status().message()));
  }
  if (!TokenMatches(req->auth_token)) {
    KVF_LOG_WARN("connector {}: side-channel request with a bad auth token", engine_id_);
    return EncodeHandshakeError("bad auth token");
  }
  return handshake_reply_;  // every rank's metadata, whichever D rank asks
}

void FerryConnectorImpl::ReleaseRemoteAsync(const KvTransferParams& remote) {
  auto job = std::make_unique<ReleaseJob>();
  ReleaseJob* raw = job.get();
  job->thread = std::thread(
      [this, raw, host = remote.remote_host, port = remote.remote_port,
       curve = keys_.ForPeer(remote.remote_engine_id, remote.remote_host),
       request = EncodeReleaseRequest(remote.remote_request_id, config_.auth_token),
       id = remote.remote_request_id, deadline = Deadline::AfterMs(config_.handshake_timeout_ms)] {
        StatusOr<std::string> reply =
            curve.ok() ? FetchOverSideChannel(host, port, request, deadline, *curve)
                       : StatusOr<std::string>(curve.status());
        Status st = reply.ok() ? DecodeOkReply(*reply) : reply.status();
        if (st.ok()) {
          UpdateStats([](ConnectorStats& s) { ++s.notifications_sent; });
        } else {
          KVF_LOG_WARN("connector {}: release of {} at {}:{} failed ({}); P frees at lease end",
                       engine_id_, id, host, port, st.ToString());
        }
        raw->done.store(true);
      });
  release_jobs_.push_back(std::move(job));
}

void FerryConnectorImpl::ReapReleaseJobs(bool all) {
  for (auto it = release_jobs_.begin(); it != release_jobs_.end();) {
    if (all || (*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = release_jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void FerryConnectorImpl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) server_->Stop();
  ReapReleaseJobs(/*all=*/true);
  for (auto& [engine, peer] : peers_) {
    if (peer.job != nullptr && peer.job->thread.joinable()) peer.job->thread.join();
  }
  for (auto& [id, r] : recvs_) {
    for (SourceRead& read : r.reads) {
      if (read.xfer.has_value()) ranks_[read.d_rank].agent->Release(*read.xfer).IgnoreError();
      read.xfer.reset();
    }
  }
  // Close the peers before freeing memory a cancelled transfer may still target.
  std::vector<std::string> engines;
  for (const auto& [engine, peer] : peers_) engines.push_back(engine);
  for (const std::string& engine : engines) DropPeer(engine);
  for (auto& [id, r] : recvs_) {
    for (SourceRead& read : r.reads) ReleaseScratch(read);
  }
  recvs_.clear();
  peers_.clear();
  for (RankEndpoint& rank : ranks_) rank.scratch_pool.reset();  // deregisters, while agents live
  // The agents go before the memory they registered: their progress threads must not serve a
  // peer's read from freed memory. When all they hold is their own (MakeLeaseTable), they stay
  // until the destructor: the engine, whose cache may be their memory, may outlive Shutdown.
  if (agents_outlive_shutdown_) return;
  for (RankEndpoint& rank : ranks_) {
    if (rank.cache_memory) rank.cache_memory->Detach();
    rank.agent.reset();
  }
}

// ---------------------------------------------------------------------------------------------
// Scheduler half.

MatchResult SchedulerHalf::GetNumNewMatchedTokens(const RequestView& request,
                                                  int32_t num_local_computed_tokens) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (p == nullptr || !p->do_remote_prefill || c_->config_.kv_role == KvRole::kProducer) {
    return {};
  }
  if (c_->loads_issued_.count(request.request_id) != 0) return {};  // one pull per request
  // Without P's first token D computes the last prompt token itself (its logits give the first
  // output token), so it needs P's KV for [local hit, prompt - 1) at most; with it, D resumes
  // after it and needs every prompt token's KV. Never further than what P offered.
  const int32_t prompt = static_cast<int32_t>(request.prompt_tokens.size());
  const int32_t offered =
      p->remote_num_tokens < 0 ? prompt : std::min(p->remote_num_tokens, prompt);
  const int32_t needed = p->first_token ? prompt : prompt - 1;
  const int32_t external = std::min(offered, needed) - num_local_computed_tokens;
  MatchResult match;
  if (external > 0) {
    match.num_external_tokens = external;
    match.load_async = true;
  } else {
    // Nothing to read. If P holds blocks, a notification frees them (sent by the worker).
    match.no_load_outcome =
        p->remote_block_ids.empty() ? LoadOutcome::kNoneOffered : LoadOutcome::kNotifyOnly;
  }
  return match;
}

void SchedulerHalf::UpdateStateAfterAlloc(const RequestView& request,
                                          std::span<const kv::LogicalBlockId> block_ids,
                                          int32_t num_external_tokens) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (p == nullptr || !p->do_remote_prefill || c_->config_.kv_role == KvRole::kProducer) return;
  if (!c_->loads_issued_.insert(request.request_id).second) return;
  LoadSpec spec;
  spec.request_id = request.request_id;
  spec.remote = *p;
  spec.local_block_ids.assign(block_ids.begin(), block_ids.end());
  spec.num_external_tokens = std::max(num_external_tokens, 0);
  spec.num_local_computed_tokens = request.num_computed_tokens;
  if (spec.num_external_tokens == 0) {
    // D needs none of P's KV: tell P to free its lease, over the side channel in the
    // background (nothing to read, so no handshake and no wait for the engine to step again).
    if (!p->remote_block_ids.empty()) {
      c_->UpdateStats([](ConnectorStats& s) { ++s.notify_only; });
      c_->ReleaseRemoteAsync(*p);
    }
    return;
  }
  c_->pending_loads_.push_back(std::move(spec));
}

void SchedulerHalf::OnTokensComputed(const RequestView& request,
                                     std::span<const kv::LogicalBlockId> block_ids,
                                     int32_t token_begin, int32_t token_end) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (!c_->config_.use_host_buffer() || p == nullptr || !p->do_remote_decode ||
      c_->config_.kv_role == KvRole::kConsumer || token_end <= token_begin) {
    return;
  }
  // Every chunk of a chunked prefill is staged (vLLM #30358 staged only the first).
  auto [it, inserted] = c_->computed_.try_emplace(
      request.request_id, FerryConnectorImpl::ComputedRange{token_begin, token_end});
  if (!inserted) {
    if (token_begin != it->second.end) it->second.first = token_begin;  // re-admitted
    it->second.end = token_end;
  }
  c_->pending_saves_.push_back({request.request_id,
                                std::vector<kv::LogicalBlockId>(block_ids.begin(), block_ids.end()),
                                token_begin, token_end});
}

FinishResult SchedulerHalf::RequestFinished(const RequestView& request,
                                            std::span<const kv::LogicalBlockId> block_ids) {
  const KvTransferParams* p = request.kv_transfer_params;
  const std::string& id = request.request_id;
  if (p == nullptr || c_->shut_down_) return {};
  if (p->do_remote_prefill && c_->config_.kv_role != KvRole::kProducer) {
    const bool issued = c_->loads_issued_.erase(id) != 0;
    // The worker's own state says whether a pull may still write into the blocks (the engine
    // may call this before or after it consumed finished_recving).
    const bool bound = std::any_of(c_->bound_loads_.begin(), c_->bound_loads_.end(),
                                   [&](const LoadSpec& l) { return l.request_id == id; });
    if (c_->recvs_.count(id) != 0 || bound) {
      // Finished while its pull is in flight: the transport may still write into the blocks,
      // so they stay allocated until the pull has stopped (reported in finished_sending).
      c_->aborted_loads_.insert(id);
      FinishResult delayed;
      delayed.delay_free_blocks = true;
      return delayed;
    }
    auto pending = std::find_if(c_->pending_loads_.begin(), c_->pending_loads_.end(),
                                [&](const LoadSpec& l) { return l.request_id == id; });
    if (pending != c_->pending_loads_.end() || !issued) {
      // Finished before its pull started: tell P to free its blocks now, not at lease end, over
      // the side channel in the background (the engine may not step again for a while).
      if (pending != c_->pending_loads_.end()) c_->pending_loads_.erase(pending);
      if (!p->remote_block_ids.empty()) c_->ReleaseRemoteAsync(*p);
    }
    return {};
  }
  if (!p->do_remote_decode || c_->config_.kv_role == KvRole::kConsumer) return {};
  if (!c_->registered_) {
    KVF_LOG_ERROR("connector {}: request {} finished before RegisterKvCache", c_->engine_id_, id);
    return {};
  }
  // Host buffer: chunks computed this step are staged before the lease is granted, so D can
  // never read a host block P has not written yet. Tokens served by P's prefix cache were
  // computed by another request, which may never have been staged: stage them too.
  if (c_->config_.use_host_buffer()) {
    auto first = c_->computed_.find(id);
    const int32_t prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
    const int32_t cached_end =
        first == c_->computed_.end() ? prompt_len : std::min(first->second.first, prompt_len);
    if (cached_end > 0 && !block_ids.empty()) {
      c_->pending_saves_.push_back(
          {id, std::vector<kv::LogicalBlockId>(block_ids.begin(), block_ids.end()), 0, cached_end});
    }
    if (first != c_->computed_.end()) c_->computed_.erase(first);
  }
  c_->StagePendingSaves(&id);
  // A request that ended by itself (eos, a stop token) is P's whole answer: no D will read it.
  if (request.generation_ended) return c_->OfferBlocks(request, block_ids.first(0));
  return c_->OfferBlocks(request, block_ids);
}

ConnectorMetadata SchedulerHalf::BuildConnectorMeta() {
  ConnectorMetadata meta;
  meta.loads = std::move(c_->pending_loads_);
  meta.requests_to_hold = std::move(c_->pending_holds_);
  c_->pending_loads_.clear();
  c_->pending_holds_.clear();
  return meta;
}

void SchedulerHalf::UpdateConnectorOutput(const ConnectorOutput& output) {
  for (const std::string& id : output.finished_sending) c_->aborted_loads_.erase(id);
}

// ---------------------------------------------------------------------------------------------
// Worker half: thin adapters.

Status WorkerHalf::RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) {
  if (cache == nullptr) return InvalidArgumentError("RegisterKvCache: null cache");
  KVF_ASSIGN_OR_RETURN(kv::HeadSharding sharding,
                       kv::HeadSharding::Create(cache->spec().num_kv_heads, 1));
  kv::KvCache* const caches[] = {cache};
  return RegisterKvCaches(caches, sharding, block_size_logical);
}

std::optional<kv::CacheMemory> WorkerHalf::CacheMemoryFor(int32_t rank) {
  return c_->CacheMemoryFor(rank);
}

Status WorkerHalf::RegisterKvCaches(std::span<kv::KvCache* const> rank_caches,
                                    const kv::HeadSharding& sharding, int32_t block_size_logical) {
  if (c_->shut_down_) return FailedPreconditionError("connector is shut down");
  return c_->Register(rank_caches, sharding, block_size_logical);
}

void WorkerHalf::BindMetadata(const ConnectorMetadata& metadata) {
  c_->bound_loads_.insert(c_->bound_loads_.end(), metadata.loads.begin(), metadata.loads.end());
}

void WorkerHalf::StartLoadKv() {
  if (!c_->shut_down_) c_->StartLoads();
}

void WorkerHalf::AfterForward() {
  if (!c_->shut_down_) c_->StagePendingSaves(nullptr);
}

ConnectorOutput WorkerHalf::GetFinished() {
  if (c_->shut_down_) return {};
  c_->ReapReleaseJobs(/*all=*/false);
  c_->StartLoads();
  c_->PollLoads();
  c_->CollectProducerFinished();
  ConnectorOutput out = std::move(c_->pending_out_);
  c_->pending_out_ = ConnectorOutput();
  return out;
}

void WorkerHalf::Shutdown() { c_->Shutdown(); }

}  // namespace internal

StatusOr<std::unique_ptr<FerryConnector>> CreateFerryConnector(
    const KvTransferConfig& config, const FerryConnectorOptions& options) {
  if (config.kv_connector != "FerryConnector") {
    return InvalidArgumentError(
        fmt::format("kv_connector '{}' is not FerryConnector", config.kv_connector));
  }
  if (options.tp_size < 1 || options.tp_size > internal::kMaxTpRanks) {
    return InvalidArgumentError(fmt::format("FerryConnectorOptions::tp_size {} outside [1, {}]",
                                            options.tp_size, internal::kMaxTpRanks));
  }
  std::string engine_id = config.engine_id;
  if (engine_id.empty()) {
    std::random_device rd;
    engine_id = fmt::format("ferry-{}-{:08x}", ::getpid(), rd());
  }
  KVF_ASSIGN_OR_RETURN(internal::SideChannelKeys keys, internal::SideChannelKeys::Load(config));
  // One agent per rank, as vLLM runs one NIXL agent per worker.
  std::vector<std::unique_ptr<transfer::Agent>> agents;
  for (int32_t r = 0; r < options.tp_size; ++r) {
    transfer::AgentOptions agent_options;
    agent_options.name = internal::RankAgentName(engine_id, r, options.tp_size);
    agent_options.backend = config.backend;
    // The socket backend listens where the side channel does: the address peers already reach.
    agent_options.socket.listen_host = config.side_channel_host;
    KVF_ASSIGN_OR_RETURN(std::unique_ptr<transfer::Agent> agent,
                         transfer::Agent::Create(agent_options));
    agents.push_back(std::move(agent));
  }
  return std::unique_ptr<FerryConnector>(new internal::FerryConnectorImpl(
      config, options, std::move(engine_id), std::move(agents), std::move(keys)));
}

}  // namespace kvferry::connector
