// D's side of the worker half: background handshakes, pulls, generation checks, failures.
//
// A load goes through these phases (RecvState::Phase), advanced by StartLoadKv/GetFinished:
//   kWaitHandshake   the remote engine's metadata is being fetched (background thread)
//   kPreGeneration   only when P's kv_transfer_params carried no generations: read them first
//   kData            the coalesced READ of P's kernel blocks (into D's cache, or staging)
//   kPostGeneration  READ of the same blocks' generations, carrying the notification to P
// then the generations are compared, a staged pull is re-laid out into D's cache, and the
// request is reported in finished_recving. Any failure reports it too, with its LOGICAL blocks
// as invalid.
#include <fmt/format.h>

#include <cstring>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {
namespace {

std::string IdsToString(std::span<const kv::LogicalBlockId> ids) {
  std::string s;
  for (kv::LogicalBlockId id : ids) s += (s.empty() ? "" : ",") + std::to_string(id.value());
  return s;
}

// What a load that ended with `outcome` reports; only a pull reports what it moved.
LoadReport ReportOf(const std::string& id, const RecvState& r, LoadOutcome outcome) {
  LoadReport report;
  report.request_id = id;
  report.outcome = outcome;
  report.local_hit_tokens = r.spec.num_local_computed_tokens;
  if (outcome == LoadOutcome::kPulled) {
    report.tokens = r.spec.num_external_tokens;
    report.bytes = r.data_bytes;
    report.descriptors = r.data_descriptors;
  }
  return report;
}

LoadOutcome KindOf(const Status& st) {
  return st.code() == StatusCode::kDeadlineExceeded ? LoadOutcome::kFailedDeadline
                                                    : LoadOutcome::kFailedTransfer;
}

}  // namespace

void FerryConnectorImpl::EnsureHandshake(const KvTransferParams& remote) {
  if (peers_.count(remote.remote_engine_id) != 0) return;
  auto job = std::make_shared<HandshakeJob>();
  PeerEntry entry;
  entry.job = job;
  // The thread gets copies: it touches nothing but its job.
  job->thread = std::thread([job, host = remote.remote_host, port = remote.remote_port,
                             expected_engine = remote.remote_engine_id, hash = compat_hash_,
                             curve = keys_.ForPeer(remote.remote_engine_id, remote.remote_host),
                             request = EncodeHandshakeRequest(0, config_.auth_token),
                             deadline = Deadline::AfterMs(config_.handshake_timeout_ms)] {
    StatusOr<HandshakeMetadata> result = [&]() -> StatusOr<HandshakeMetadata> {
      KVF_RETURN_IF_ERROR(curve.status());  // no key for this P: nothing is sent
      KVF_ASSIGN_OR_RETURN(std::string reply,
                           FetchOverSideChannel(host, port, request, deadline, *curve));
      KVF_ASSIGN_OR_RETURN(HandshakeMetadata meta, DecodeHandshakeReply(reply, hash));
      if (meta.engine_id != expected_engine) {
        return FailedPreconditionError(
            fmt::format("{}:{} is engine '{}', kv_transfer_params named '{}'", host, port,
                        meta.engine_id, expected_engine));
      }
      return meta;
    }();
    MutexLock lock(&job->mu);
    job->result = std::move(result);
    job->done = true;
  });
  peers_.emplace(remote.remote_engine_id, std::move(entry));
}

void FerryConnectorImpl::AdvanceHandshakes() {
  for (auto it = peers_.begin(); it != peers_.end();) {
    PeerEntry& peer = it->second;
    if (peer.state != PeerEntry::State::kHandshaking) {
      ++it;
      continue;
    }
    std::optional<StatusOr<HandshakeMetadata>> result;
    {
      MutexLock lock(&peer.job->mu);
      if (!peer.job->done) {
        ++it;
        continue;
      }
      result = std::move(peer.job->result);
    }
    peer.job->thread.join();
    peer.job.reset();
    Status st = result->status();
    if (st.ok() && (*result)->tp_size != 1) {
      st = UnimplementedError(
          fmt::format("remote tp_size {} (only 1 is supported)", (*result)->tp_size));
    }
    if (st.ok()) {
      StatusOr<transfer::PeerHandle> handle = agent_->LoadRemoteMetadata((*result)->agent_metadata);
      if (handle.ok()) {
        peer.peer = *handle;
        peer.meta = std::move(**result);
        for (const WireRegion& r : peer.meta.regions) peer.remote_regions.push_back({r.id});
        peer.state = PeerEntry::State::kReady;
        UpdateStats([](ConnectorStats& st) { ++st.handshakes; });
        KVF_LOG_INFO("connector {}: handshake with {} done (kernel block {}, logical {}, {}{})",
                     engine_id_, it->first, peer.meta.block_size_kernel,
                     peer.meta.block_size_logical, kv::LayoutName(peer.meta.layout),
                     peer.meta.host_buffer ? ", host buffer" : "");
        ++it;
        continue;
      }
      st = handle.status();
    }
    // Fail every load waiting for this engine; the next request retries the handshake.
    const std::string engine = it->first;
    it = peers_.erase(it);
    KVF_LOG_WARN("connector {}: handshake with {} failed: {}", engine_id_, engine, st.ToString());
    for (auto r = recvs_.begin(); r != recvs_.end();) {
      auto next = std::next(r);
      if (r->second.phase == RecvState::Phase::kWaitHandshake &&
          r->second.spec.remote.remote_engine_id == engine) {
        FailLoad(r->first, r->second, LoadOutcome::kFailedHandshake, st);
      }
      r = next;
    }
  }
}

void FerryConnectorImpl::StartLoads() {
  if (cache_ == nullptr) return;
  for (LoadSpec& spec : bound_loads_) {
    RecvState r;
    r.invalid_on_failure = LocalBlocksForTokens(
        spec.local_block_ids, block_size_logical_, spec.num_local_computed_tokens,
        int64_t{spec.num_local_computed_tokens} + spec.num_external_tokens);
    r.spec = std::move(spec);
    EnsureHandshake(r.spec.remote);
    const std::string id = r.spec.request_id;
    if (!recvs_.emplace(id, std::move(r)).second) {
      KVF_LOG_ERROR("connector {}: second load for request {} ignored", engine_id_, id);
    }
  }
  bound_loads_.clear();
  AdvanceHandshakes();
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    auto next = std::next(it);
    RecvState& r = it->second;
    if (r.phase == RecvState::Phase::kWaitHandshake) {
      auto peer = peers_.find(r.spec.remote.remote_engine_id);
      if (peer == peers_.end()) {
        // Its engine was dropped (a sibling's transfer failed) before this load started.
        EnsureHandshake(r.spec.remote);
        it = next;
        continue;
      }
      if (peer != peers_.end() && peer->second.state == PeerEntry::State::kReady) {
        if (Status st = StartPull(r, peer->second); !st.ok()) {
          FailLoad(it->first, r, KindOf(st), st);
        }
      }
    }
    it = next;
  }
}

Status FerryConnectorImpl::StartPull(RecvState& r, PeerEntry& peer) {
  PullRequest req;
  req.remote = {peer.meta.Spec(), peer.meta.block_size_logical};
  req.local = {spec_, block_size_logical_};
  req.local_cache_registered = !config_.use_host_buffer();
  req.remote_block_ids = r.spec.remote.remote_block_ids;
  req.local_block_ids = r.spec.local_block_ids;
  req.token_begin = r.spec.num_local_computed_tokens;
  req.token_end = int64_t{r.spec.num_local_computed_tokens} + r.spec.num_external_tokens;
  KVF_ASSIGN_OR_RETURN(r.plan, PlanPull(req));

  const size_t n_gens = r.plan.remote_logical_blocks.size();
  const auto& gens = r.spec.remote.remote_block_generations;
  if (!gens.empty() && gens.size() != r.spec.remote.remote_block_ids.size()) {
    return InvalidArgumentError(
        fmt::format("kv_transfer_params: {} remote_block_generations for {} remote_block_ids",
                    gens.size(), r.spec.remote.remote_block_ids.size()));
  }
  if (!gens.empty()) {
    for (int32_t index : r.plan.remote_logical_index) r.expected_generations.push_back(gens[index]);
  }
  const kv::CacheSpec staging = r.plan.StagingSpec();
  const uint64_t staging_bytes = staging.region_bytes() * staging.num_regions();
  r.generations_offset = (staging_bytes + 7) / 8 * 8;
  r.scratch_bytes = r.generations_offset + n_gens * sizeof(uint64_t);
  r.scratch.reset(new std::byte[r.scratch_bytes]());
  KVF_ASSIGN_OR_RETURN(
      transfer::RegionHandle region,
      agent_->RegisterMemory(r.scratch.get(), r.scratch_bytes, transfer::MemoryKind::kHost));
  r.scratch_region = region;
  if (r.expected_generations.empty()) return PostGenerationRead(r, peer, false);
  return PostData(r, peer);
}

Status FerryConnectorImpl::PostData(RecvState& r, PeerEntry& peer) {
  std::vector<transfer::RegionHandle> local =
      r.plan.direct ? local_regions_ : std::vector<transfer::RegionHandle>{*r.scratch_region};
  DescriptorPair d = BuildDescriptors(r.plan, peer.remote_regions, local);
  transfer::TransferRequest req{.op = transfer::XferOp::kRead,
                                .peer = peer.peer,
                                .local = std::move(d.local),
                                .remote = std::move(d.remote),
                                .notification = "",
                                .timeout_ms = config_.transfer_timeout_ms};
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, agent_->PrepareTransfer(req));
  r.xfer = x;
  KVF_ASSIGN_OR_RETURN(transfer::XferInfo info, agent_->GetXferInfo(x));
  r.data_bytes = info.total_bytes;
  r.data_descriptors = info.num_descriptors_merged;
  r.data_posted_at = Deadline::Clock::now();
  r.phase = RecvState::Phase::kData;
  return agent_->Post(x);
}

Status FerryConnectorImpl::PostGenerationRead(RecvState& r, PeerEntry& peer,
                                              bool with_notification) {
  transfer::TransferRequest req{
      .op = transfer::XferOp::kRead,
      .peer = peer.peer,
      .local = {},
      .remote = {},
      .notification = with_notification ? r.spec.remote.remote_request_id : std::string(),
      .timeout_ms = config_.transfer_timeout_ms};
  const transfer::RegionHandle table{peer.meta.generation_table.id};
  for (size_t i = 0; i < r.plan.remote_logical_blocks.size(); ++i) {
    req.local.push_back(
        {*r.scratch_region, r.generations_offset + i * sizeof(uint64_t), sizeof(uint64_t)});
    req.remote.push_back(
        {table, static_cast<uint64_t>(r.plan.remote_logical_blocks[i].value()) * sizeof(uint64_t),
         sizeof(uint64_t)});
  }
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, agent_->PrepareTransfer(req));
  r.xfer = x;
  r.phase =
      with_notification ? RecvState::Phase::kPostGeneration : RecvState::Phase::kPreGeneration;
  return agent_->Post(x);
}

// One poll of a posted load. Sets *finished when the load completed successfully.
Status FerryConnectorImpl::Advance(RecvState& r, bool* finished) {
  KVF_ASSIGN_OR_RETURN(transfer::XferState state, agent_->Poll(*r.xfer));
  if (state == transfer::XferState::kInProgress) return Status::Ok();
  KVF_RETURN_IF_ERROR(agent_->Release(*r.xfer));
  r.xfer.reset();
  auto peer = peers_.find(r.spec.remote.remote_engine_id);
  if (r.phase != RecvState::Phase::kPostGeneration &&
      (peer == peers_.end() || peer->second.state != PeerEntry::State::kReady)) {
    return UnavailableError("the remote engine's connection was dropped");
  }
  auto read_generations = [&r] {
    std::vector<uint64_t> g(r.plan.remote_logical_blocks.size());
    std::memcpy(g.data(), r.scratch.get() + r.generations_offset, g.size() * sizeof(uint64_t));
    return g;
  };
  switch (r.phase) {
    case RecvState::Phase::kPreGeneration:
      r.expected_generations = read_generations();
      return PostData(r, peer->second);
    case RecvState::Phase::kData: {
      auto us = std::chrono::duration_cast<std::chrono::microseconds>(Deadline::Clock::now() -
                                                                      r.data_posted_at)
                    .count();
      UpdateStats([&](ConnectorStats& s) {
        ++s.transfers;
        s.tokens += static_cast<uint64_t>(r.spec.num_external_tokens);
        s.bytes += r.data_bytes;
        s.descriptors += r.data_descriptors;
        s.duration_us_total += static_cast<uint64_t>(us);
      });
      KVF_LOG_DEBUG("connector {}: pulled {} bytes in {} descriptors in {} us for {}", engine_id_,
                    r.data_bytes, r.data_descriptors, us, r.spec.request_id);
      if (after_data_read_for_test) after_data_read_for_test(r.spec.request_id);
      peer = peers_.find(r.spec.remote.remote_engine_id);
      if (peer == peers_.end())
        return UnavailableError("the remote engine's connection was dropped");
      return PostGenerationRead(r, peer->second, true);
    }
    case RecvState::Phase::kPostGeneration: {
      // The read carried the notification: P has it (and frees) whatever the check says.
      UpdateStats([](ConnectorStats& s) { ++s.notifications_sent; });
      std::vector<uint64_t> now = read_generations();
      for (size_t i = 0; i < now.size(); ++i) {
        if (now[i] != r.expected_generations[i]) {
          return DataLossError(fmt::format(
              "P's logical block {} changed generation {} -> {} (lease ran out, block reused)",
              r.plan.remote_logical_blocks[i].value(), r.expected_generations[i], now[i]));
        }
      }
      if (!r.plan.direct) {
        const kv::CacheSpec staged = r.plan.StagingSpec();
        kv::KvSourceView src{staged, {}, r.plan.staging_block_table};
        for (int32_t reg = 0; reg < staged.num_regions(); ++reg) {
          src.regions.push_back(r.scratch.get() + reg * staged.region_bytes());
        }
        std::vector<kv::KernelBlockId> table = geometry_->ExpandBlockTable(r.spec.local_block_ids);
        kv::KvDestView dst = kv::DestViewOf(*cache_, table);
        KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, r.plan.token_begin, r.plan.token_end));
      }
      *finished = true;
      return Status::Ok();
    }
    case RecvState::Phase::kWaitHandshake:
      break;
  }
  return InternalError("load polled in the wrong phase");
}

void FerryConnectorImpl::PollLoads() {
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    auto next = std::next(it);
    RecvState& r = it->second;
    if (r.xfer.has_value()) {
      bool finished = false;
      const bool checking = r.phase == RecvState::Phase::kPostGeneration;
      Status st = Advance(r, &finished);
      if (!st.ok()) {
        FailLoad(it->first, r,
                 checking && st.code() == StatusCode::kDataLoss ? LoadOutcome::kFailedGeneration
                                                                : KindOf(st),
                 st);
      } else if (finished) {
        FinishLoad(it->first, r);
      }
    }
    it = next;
  }
}

void FerryConnectorImpl::FinishLoad(const std::string& id, RecvState& r) {
  ReleaseScratch(r);
  if (aborted_loads_.count(id) != 0) {
    pending_out_.finished_sending.push_back(id);
  } else {
    pending_out_.finished_recving.push_back(id);
    pending_out_.load_reports.push_back(ReportOf(id, r, LoadOutcome::kPulled));
  }
  recvs_.erase(id);
}

void FerryConnectorImpl::FailLoad(const std::string& id, RecvState& r, LoadOutcome kind,
                                  const Status& why) {
  KVF_LOG_WARN("connector {}: KV load of {} from {} failed ({}): {}; invalid logical blocks [{}]",
               engine_id_, id, r.spec.remote.remote_engine_id, LoadOutcomeName(kind),
               why.ToString(), IdsToString(r.invalid_on_failure));
  if (r.xfer.has_value()) {
    agent_->Release(*r.xfer).IgnoreError();
    r.xfer.reset();
  }
  if (kind == LoadOutcome::kFailedTransfer || kind == LoadOutcome::kFailedDeadline) {
    // The transport may still write into this load's memory until the connection is closed
    // (agent.h, poisoning rule): close it before the blocks or the staging area are reused.
    DropPeer(r.spec.remote.remote_engine_id);
  }
  ReleaseScratch(r);
  UpdateStats([kind](ConnectorStats& s) {
    switch (kind) {
      case LoadOutcome::kFailedHandshake:
        ++s.failures_handshake;
        break;
      case LoadOutcome::kFailedTransfer:
        ++s.failures_transfer;
        break;
      case LoadOutcome::kFailedDeadline:
        ++s.failures_deadline;
        break;
      case LoadOutcome::kFailedGeneration:
        ++s.failures_generation;
        break;
      case LoadOutcome::kPulled:
      case LoadOutcome::kNotifyOnly:
      case LoadOutcome::kNoneOffered:
        break;  // not failures
    }
  });
  if (aborted_loads_.count(id) != 0) {
    pending_out_.finished_sending.push_back(id);
  } else {
    pending_out_.finished_recving.push_back(id);
    pending_out_.invalid_block_ids.insert(pending_out_.invalid_block_ids.end(),
                                          r.invalid_on_failure.begin(), r.invalid_on_failure.end());
    pending_out_.load_reports.push_back(ReportOf(id, r, kind));
  }
  recvs_.erase(id);
}

void FerryConnectorImpl::ReleaseScratch(RecvState& r) {
  if (r.scratch_region.has_value()) {
    agent_->DeregisterMemory(*r.scratch_region).IgnoreError();
    r.scratch_region.reset();
  }
  r.scratch.reset();
}

void FerryConnectorImpl::DropPeer(const std::string& engine_id) {
  auto it = peers_.find(engine_id);
  if (it == peers_.end() || it->second.state != PeerEntry::State::kReady) return;
  agent_->RemovePeer(it->second.peer).IgnoreError();
  peers_.erase(it);
}

}  // namespace kvferry::connector::internal
