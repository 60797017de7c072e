// The factory, registration and side channel, the scheduler half, and P's side of the worker
// (leases, host-buffer staging). D's pull path is in recv_path.cc.
#include "kvferry/connector/ferry_connector.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector {
namespace internal {

FerryConnectorImpl::FerryConnectorImpl(const KvTransferConfig& config,
                                       const FerryConnectorOptions& options, std::string engine_id,
                                       std::unique_ptr<transfer::Agent> agent, SideChannelKeys keys)
    : config_(config),
      keys_(std::move(keys)),
      options_(options),
      engine_id_(std::move(engine_id)),
      agent_(std::move(agent)) {
  // Fault injection for the process-level fault tests (docs/reliability.md): widen the window
  // between a pull's data READ and its generation READ (which carries the notification), so a
  // test can kill P in it. Blocks the engine thread for that long; never set it in production.
  if (const char* env = std::getenv("KVFERRY_FAULT_PAUSE_AFTER_DATA_READ_MS")) {
    const int pause_ms = std::atoi(env);
    if (pause_ms > 0) {
      KVF_LOG_WARN("connector {}: fault injection: pausing {} ms after each data READ", engine_id_,
                   pause_ms);
      after_data_read_for_test = [pause_ms](const std::string&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      };
    }
  }
}

FerryConnectorImpl::~FerryConnectorImpl() { Shutdown(); }

ConnectorStats FerryConnectorImpl::Stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

// ---------------------------------------------------------------------------------------------
// Registration and the side channel.

Status FerryConnectorImpl::Register(kv::KvCache* cache, int32_t block_size_logical) {
  if (cache_ != nullptr) return FailedPreconditionError("RegisterKvCache called twice");
  if (cache == nullptr) return InvalidArgumentError("RegisterKvCache: null cache");
  // Geometry from the allocated memory, never from configuration (the seed's lesson).
  KVF_ASSIGN_OR_RETURN(spec_, kv::GeometryOf(*cache));
  KVF_ASSIGN_OR_RETURN(kv::BlockGeometry geometry,
                       kv::BlockGeometry::Create(block_size_logical, spec_.block_size_kernel));
  geometry_ = geometry;
  block_size_logical_ = block_size_logical;
  const int32_t num_blocks_logical = spec_.num_blocks_kernel / geometry.kernel_blocks_per_logical();
  compat_hash_ = CompatibilityHash(options_.model_name, spec_);

  const bool serves = config_.kv_role != KvRole::kConsumer;
  if (config_.use_host_buffer()) {
    // The cache stays unregistered. P mirrors it, kernel block for kernel block, in a
    // registered host buffer of the same geometry; D pulls into per-load staging instead.
    if (serves) {
      // Allocated by the agent: with UCX, shared memory that a D on this host maps, so its
      // pull is one memcpy (docs/transfer.md, "Mapped regions"). Freed with the agent.
      const uint64_t region_bytes = spec_.region_bytes();
      for (int32_t r = 0; r < spec_.num_regions(); ++r) {
        KVF_ASSIGN_OR_RETURN(transfer::AllocatedMemory m, agent_->AllocateMemory(region_bytes));
        host_regions_.push_back(static_cast<std::byte*>(m.addr));
        local_regions_.push_back(m.region);
      }
    }
  } else {
    for (int32_t r = 0; r < cache->num_regions(); ++r) {
      kv::RegionView v = cache->region(r);
      KVF_ASSIGN_OR_RETURN(
          transfer::RegionHandle h,
          agent_->RegisterMemory(v.base, v.size_bytes, transfer::MemoryKind::kHost));
      local_regions_.push_back(h);
    }
  }
  leases_ = std::make_unique<LeaseTable>(num_blocks_logical);
  KVF_ASSIGN_OR_RETURN(generation_region_, agent_->RegisterMemory(leases_->generations_data(),
                                                                  leases_->generations_size_bytes(),
                                                                  transfer::MemoryKind::kHost));
  cache_ = cache;

  if (!serves) return Status::Ok();
  KVF_ASSIGN_OR_RETURN(std::string blob, agent_->GetLocalMetadata());
  HandshakeMetadata meta;
  meta.engine_id = engine_id_;
  meta.tp_rank = options_.tp_rank;
  meta.tp_size = options_.tp_size;
  meta.block_size_logical = block_size_logical;
  meta.block_size_kernel = spec_.block_size_kernel;
  meta.layout = spec_.layout;
  meta.dtype = spec_.dtype;
  meta.kind = spec_.kind;
  meta.num_layers = spec_.num_layers;
  meta.num_kv_heads = spec_.num_kv_heads;
  meta.head_dim = spec_.head_dim;
  meta.num_blocks_kernel = spec_.num_blocks_kernel;
  meta.host_buffer = config_.use_host_buffer();
  for (int32_t r = 0; r < spec_.num_regions(); ++r) {
    uint64_t base = config_.use_host_buffer() ? reinterpret_cast<uint64_t>(host_regions_[r])
                                              : reinterpret_cast<uint64_t>(cache->region(r).base);
    meta.regions.push_back(
        {local_regions_[r].id, base, spec_.region_bytes(), spec_.bytes_per_kernel_block()});
  }
  meta.generation_table = {generation_region_.id,
                           reinterpret_cast<uint64_t>(leases_->generations_data()),
                           leases_->generations_size_bytes(), 0};
  meta.agent_metadata = std::move(blob);
  handshake_reply_ = EncodeHandshakeReply(compat_hash_, meta);

  KVF_ASSIGN_OR_RETURN(server_, SideChannelServer::Start(
                                    config_.side_channel_host, config_.side_channel_port,
                                    [this](std::string_view req) { return HandleSideChannel(req); },
                                    keys_.server()));
  server_port_.store(server_->port());
  KVF_LOG_INFO(
      "connector {}: serving KV metadata on {}:{} ({} regions, kernel block {} tokens, "
      "logical {}, {}{}, {})",
      engine_id_, config_.side_channel_host, server_->port(), spec_.num_regions(),
      spec_.block_size_kernel, block_size_logical, kv::LayoutName(spec_.layout),
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
  if (req->tp_rank != options_.tp_rank) {
    return EncodeHandshakeError(
        fmt::format("no TP rank {} here (this is rank {})", req->tp_rank, options_.tp_rank));
  }
  return handshake_reply_;
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

// ---------------------------------------------------------------------------------------------
// P: host-buffer staging, leases.

void FerryConnectorImpl::StagePendingSaves(const std::string* only_request) {
  if (pending_saves_.empty()) return;
  std::vector<PendingSave> keep;
  for (PendingSave& s : pending_saves_) {
    if (only_request != nullptr && s.request_id != *only_request) {
      keep.push_back(std::move(s));
      continue;
    }
    if (Status st = StageOne(s); !st.ok()) {
      // The host buffer now holds stale (or half-written) bytes from this chunk on: remember
      // where, so that OfferBlocks never offers them.
      KVF_LOG_ERROR("connector {}: host-buffer staging of {} tokens [{}, {}) failed: {}",
                    engine_id_, s.request_id, s.token_begin, s.token_end, st.ToString());
      auto [it, inserted] = stage_failed_from_.try_emplace(s.request_id, s.token_begin);
      if (!inserted) it->second = std::min(it->second, s.token_begin);
      UpdateStats([](ConnectorStats& st) { ++st.stage_failures; });
    }
  }
  pending_saves_ = std::move(keep);
}

Status FerryConnectorImpl::StageOne(const PendingSave& s) {
  if (stage_fault_for_test && stage_fault_for_test(s.request_id, s.token_begin)) {
    return InternalError("injected staging fault");
  }
  // Same geometry both sides: the host buffer mirrors the cache kernel block for kernel block,
  // addressed by the same kernel ids (the mapping of the request's logical ids).
  std::vector<kv::KernelBlockId> table = geometry_->ExpandBlockTable(s.block_ids);
  kv::KvSourceView src = kv::SourceViewOf(*cache_, table);
  kv::KvDestView dst{spec_, host_regions_, table};
  KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, s.token_begin, s.token_end));
  const int32_t k = spec_.block_size_kernel;
  const uint64_t blocks = s.token_end > s.token_begin
                              ? static_cast<uint64_t>((s.token_end - 1) / k - s.token_begin / k + 1)
                              : 0;
  UpdateStats([&](ConnectorStats& st) { st.staged_kernel_blocks += blocks; });
  return Status::Ok();
}

FinishResult FerryConnectorImpl::OfferBlocks(const RequestView& request,
                                             std::span<const kv::LogicalBlockId> block_ids) {
  const std::string& id = request.request_id;
  const int32_t prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
  size_t offered = block_ids.size();
  if (auto failed = stage_failed_from_.find(id); failed != stage_failed_from_.end()) {
    const int32_t first_bad = failed->second;
    stage_failed_from_.erase(failed);
    if (config_.kv_load_failure_policy == KvLoadFailurePolicy::kFail) {
      UpdateStats([&](ConnectorStats& s) { s.blocks_withheld += block_ids.size(); });
      FinishResult failed_request;
      failed_request.error = DataLossError(
          fmt::format("request {}: its KV could not be staged for the remote decoder from token "
                      "{} on (kv_load_failure_policy fail)",
                      id, first_bad));
      return failed_request;
    }
    // Only whole logical blocks before the first bad token; D computes the rest itself.
    offered = std::min(offered, static_cast<size_t>(first_bad / block_size_logical_));
    const uint64_t withheld = block_ids.size() - offered;
    UpdateStats([withheld](ConnectorStats& s) { s.blocks_withheld += withheld; });
    KVF_LOG_WARN("connector {}: request {}: offering {} of {} blocks (staging failed at token {})",
                 engine_id_, id, offered, block_ids.size(), first_bad);
  }
  KvTransferParams out;
  out.do_remote_prefill = true;
  out.remote_engine_id = engine_id_;
  out.remote_request_id = id;
  out.remote_host = config_.side_channel_host;
  out.remote_port = server_port_.load();
  out.tp_size = options_.tp_size;
  out.remote_num_tokens = std::min(prompt_len, static_cast<int32_t>(offered) * block_size_logical_);
  FinishResult result;
  if (offered == 0) {  // nothing held for D
    result.kv_transfer_params = std::move(out);
    return result;
  }
  const std::span<const kv::LogicalBlockId> leased = block_ids.first(offered);
  StatusOr<std::vector<uint64_t>> gens =
      leases_->Grant(id, leased, Deadline::AfterMs(config_.lease_ms));
  if (!gens.ok()) {
    KVF_LOG_ERROR("connector {}: cannot hold blocks of {}: {}", engine_id_, id,
                  gens.status().ToString());
    return {};
  }
  out.remote_block_ids.assign(leased.begin(), leased.end());  // LOGICAL ids, P's geometry
  out.remote_block_generations = std::move(*gens);
  pending_holds_.push_back(id);
  const int64_t held = leases_->blocks_held();
  UpdateStats([held](ConnectorStats& s) {
    ++s.leases_granted;
    s.blocks_held = held;
  });
  result.delay_free_blocks = true;
  result.kv_transfer_params = std::move(out);
  return result;
}

void FerryConnectorImpl::CollectProducerFinished() {
  if (leases_ == nullptr) return;
  std::vector<std::string> released;
  {
    MutexLock lock(&released_mu_);
    released.swap(released_);
  }
  for (std::string& id : released) {
    if (leases_->End(id).ok()) {
      pending_out_.finished_sending.push_back(std::move(id));
      UpdateStats([](ConnectorStats& s) { ++s.leases_released_by_notification; });
    }
  }
  for (transfer::Notification& n : agent_->GetNotifications()) {
    Status st = leases_->End(n.message);
    if (st.ok()) {
      pending_out_.finished_sending.push_back(n.message);
      UpdateStats([](ConnectorStats& s) { ++s.leases_released_by_notification; });
    } else {
      // Late (lease already expired) or unknown: nothing held, nothing to free.
      KVF_LOG_WARN("connector {}: notification '{}' from {} matches no live lease (expired?)",
                   engine_id_, n.message, n.peer_name);
    }
  }
  for (std::string& id : leases_->EndExpired()) {
    KVF_LOG_WARN(
        "connector {}: lease of request {} expired after {} ms without a notification; "
        "freeing its blocks",
        engine_id_, id, config_.lease_ms);
    UpdateStats([](ConnectorStats& s) { ++s.leases_expired; });
    pending_out_.finished_sending.push_back(std::move(id));
  }
  const int64_t held = leases_->blocks_held();
  UpdateStats([held](ConnectorStats& s) { s.blocks_held = held; });
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
    if (r.xfer.has_value()) agent_->Release(*r.xfer).IgnoreError();
    r.xfer.reset();
  }
  // Close the peers before freeing memory a cancelled transfer may still target.
  for (auto& [engine, peer] : peers_) {
    if (peer.state == PeerEntry::State::kReady) agent_->RemovePeer(peer.peer).IgnoreError();
  }
  for (auto& [id, r] : recvs_) ReleaseScratch(r);
  recvs_.clear();
  peers_.clear();
  // The agent goes before the memory it registered (cache, host buffer, generation table):
  // its progress thread must not serve a peer's read from freed memory.
  agent_.reset();
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
  // D computes the last prompt token itself (its logits give the first output token), so it
  // needs P's KV for [local hit, prompt - 1) at most, and no further than what P offered.
  const int32_t prompt = static_cast<int32_t>(request.prompt_tokens.size());
  const int32_t offered =
      p->remote_num_tokens < 0 ? prompt : std::min(p->remote_num_tokens, prompt);
  const int32_t external = std::min(offered, prompt - 1) - num_local_computed_tokens;
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
  if (c_->leases_ == nullptr) {
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
  if (c_->shut_down_) return FailedPreconditionError("connector is shut down");
  return c_->Register(cache, block_size_logical);
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
  if (options.tp_size != 1 || options.tp_rank != 0) {
    return UnimplementedError("FerryConnector supports tp_size 1 only");
  }
  std::string engine_id = config.engine_id;
  if (engine_id.empty()) {
    std::random_device rd;
    engine_id = fmt::format("ferry-{}-{:08x}", ::getpid(), rd());
  }
  transfer::AgentOptions agent_options;
  agent_options.name = engine_id;
  agent_options.backend = config.backend;
  // The socket backend listens where the side channel does: the address peers already reach.
  agent_options.socket.listen_host = config.side_channel_host;
  KVF_ASSIGN_OR_RETURN(internal::SideChannelKeys keys, internal::SideChannelKeys::Load(config));
  KVF_ASSIGN_OR_RETURN(std::unique_ptr<transfer::Agent> agent,
                       transfer::Agent::Create(agent_options));
  return std::unique_ptr<FerryConnector>(new internal::FerryConnectorImpl(
      config, options, std::move(engine_id), std::move(agent), std::move(keys)));
}

}  // namespace kvferry::connector
