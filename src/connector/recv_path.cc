// D's side of the worker half: background handshakes, pulls, generation checks, failures.
//
// A load waits for the remote engine's handshake (every P rank's metadata, fetched once per
// engine by a background thread), then becomes one read per (D rank, P rank it reads heads
// from) — kv::PlanHeadReads — each through its D rank's own agent. A read goes through
// (SourceRead::Phase), advanced by StartLoadKv/GetFinished:
//   kPreGeneration   only when P's kv_transfer_params carried no generations: read them first
//   kData            the coalesced READ of the P rank's kernel blocks (its heads) into the D
//                    rank's cache, or staging
//   kPostGeneration  READ of the same blocks' generations in that P rank's table, carrying the
//                    notification "<P request id>:<D tp_size>" to that P rank
// then the generations are compared and a staged read is re-laid out into the D rank's cache
// (its heads). The load is reported in finished_recving once no read is in flight: pulled when
// every read is done, else failed with the first failure and the load's LOGICAL blocks as
// invalid.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {
namespace {

// Per D rank, the scratch areas kept for later pulls (ScratchPool): enough for a few loads in
// flight at once, holding at most 1 GiB of idle staging per rank.
constexpr size_t kScratchAreasKept = 4;
constexpr uint64_t kScratchBytesKept = uint64_t{1} << 30;

std::string IdsToString(std::span<const kv::LogicalBlockId> ids) {
  std::string s;
  for (kv::LogicalBlockId id : ids) s += (s.empty() ? "" : ",") + std::to_string(id.value());
  return s;
}

// What a load that ended with `outcome` reports; only a pull reports what it moved.
LoadReport ReportOf(const std::string& id, const RecvState& r, LoadOutcome outcome,
                    int32_t d_tp_size) {
  LoadReport report;
  report.request_id = id;
  report.outcome = outcome;
  report.local_hit_tokens = r.spec.num_local_computed_tokens;
  if (outcome != LoadOutcome::kPulled) return report;
  report.tokens = r.spec.num_external_tokens;
  report.ranks.resize(static_cast<size_t>(d_tp_size));
  for (int32_t d = 0; d < d_tp_size; ++d) report.ranks[d].rank = d;
  for (const SourceRead& read : r.reads) {
    RankLoad& rank = report.ranks[read.d_rank];
    rank.source_ranks.push_back(read.heads.src_rank);
    rank.bytes += read.data_bytes;
    rank.descriptors += read.data_descriptors;
    report.bytes += read.data_bytes;
    report.descriptors += read.data_descriptors;
    if (read.data_by_memcpy) report.bytes_by_memcpy += read.data_bytes;
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
    StatusOr<std::vector<HandshakeMetadata>> result =
        [&]() -> StatusOr<std::vector<HandshakeMetadata>> {
      KVF_RETURN_IF_ERROR(curve.status());  // no key for this P: nothing is sent
      KVF_ASSIGN_OR_RETURN(std::string reply,
                           FetchOverSideChannel(host, port, request, deadline, *curve));
      KVF_ASSIGN_OR_RETURN(std::vector<HandshakeMetadata> ranks, DecodeHandshakeReply(reply, hash));
      if (ranks[0].engine_id != expected_engine) {
        return FailedPreconditionError(
            fmt::format("{}:{} is engine '{}', kv_transfer_params named '{}'", host, port,
                        ranks[0].engine_id, expected_engine));
      }
      return ranks;
    }();
    MutexLock lock(&job->mu);
    job->result = std::move(result);
    job->done = true;
  });
  peers_.emplace(remote.remote_engine_id, std::move(entry));
}

// Which P ranks each D rank reads from, and a connection of each D rank's agent to each of
// them. A failure leaves no connection behind.
Status FerryConnectorImpl::ConnectRanks(PeerEntry& peer) {
  const int32_t p_tp = static_cast<int32_t>(peer.ranks.size());
  StatusOr<kv::HeadSharding> sharding = kv::HeadSharding::Create(sharding_.num_kv_heads(), p_tp);
  if (!sharding.ok() || peer.ranks[0].num_kv_heads != sharding->HeadsPerRank()) {
    return FailedPreconditionError(fmt::format(
        "P's {} ranks hold {} KV heads each; this model's {} KV heads over {} ranks would be {}",
        p_tp, peer.ranks[0].num_kv_heads, sharding_.num_kv_heads(), p_tp,
        sharding.ok() ? sharding->HeadsPerRank() : 0));
  }
  peer.sharding = *sharding;
  peer.links.assign(ranks_.size(), std::vector<std::optional<transfer::PeerHandle>>(p_tp));
  for (const HandshakeMetadata& m : peer.ranks) {
    std::vector<transfer::RegionHandle> regions;
    for (const WireRegion& r : m.regions) regions.push_back({r.id});
    peer.remote_regions.push_back(std::move(regions));
  }
  for (int32_t d = 0; d < tp_size(); ++d) {
    KVF_ASSIGN_OR_RETURN(std::vector<kv::HeadRead> reads,
                         kv::PlanHeadReads(peer.sharding, sharding_, d));
    for (const kv::HeadRead& read : reads) {
      StatusOr<transfer::PeerHandle> link =
          ranks_[d].agent->LoadRemoteMetadata(peer.ranks[read.src_rank].agent_metadata);
      if (!link.ok()) {
        for (int32_t dd = 0; dd < tp_size(); ++dd) {
          for (auto& l : peer.links[dd]) {
            if (l.has_value()) ranks_[dd].agent->RemovePeer(*l).IgnoreError();
          }
        }
        return link.status();
      }
      peer.links[d][read.src_rank] = *link;
    }
    peer.reads.push_back(std::move(reads));
  }
  return Status::Ok();
}

void FerryConnectorImpl::AdvanceHandshakes() {
  for (auto it = peers_.begin(); it != peers_.end();) {
    PeerEntry& peer = it->second;
    if (peer.state != PeerEntry::State::kHandshaking) {
      ++it;
      continue;
    }
    std::optional<StatusOr<std::vector<HandshakeMetadata>>> result;
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
    if (st.ok()) {
      peer.ranks = std::move(**result);
      st = ConnectRanks(peer);
    }
    if (st.ok()) {
      peer.state = PeerEntry::State::kReady;
      UpdateStats([](ConnectorStats& s) { ++s.handshakes; });
      const HandshakeMetadata& m = peer.ranks[0];
      KVF_LOG_INFO(
          "connector {}: handshake with {} done ({} TP rank(s), kernel block {}, logical {}, "
          "{}{})",
          engine_id_, it->first, peer.ranks.size(), m.block_size_kernel, m.block_size_logical,
          kv::LayoutName(m.layout), m.host_buffer ? ", host buffer" : "");
      ++it;
      continue;
    }
    // Fail every load waiting for this engine; the next request retries the handshake.
    const std::string engine = it->first;
    it = peers_.erase(it);
    KVF_LOG_WARN("connector {}: handshake with {} failed: {}", engine_id_, engine, st.ToString());
    for (auto& [id, r] : recvs_) {
      if (!r.started && r.spec.remote.remote_engine_id == engine) {
        r.started = true;
        RecordFailure(r, nullptr, LoadOutcome::kFailedHandshake, st);
      }
    }
  }
}

void FerryConnectorImpl::StartLoads() {
  if (!registered_) return;
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
  for (auto& [id, r] : recvs_) {
    if (r.started) continue;
    auto peer = peers_.find(r.spec.remote.remote_engine_id);
    if (peer == peers_.end()) {
      // Its engine was dropped (a sibling's transfer failed) before this load started.
      EnsureHandshake(r.spec.remote);
      continue;
    }
    if (peer->second.state != PeerEntry::State::kReady) continue;
    r.started = true;
    StartPull(r, peer->second);
  }
  PollLoads();
}

// Plans and posts every read of a load; a failure is recorded on the load (the reads already
// posted run to their end, or are cut off with the engine's connections).
void FerryConnectorImpl::StartPull(RecvState& r, PeerEntry& peer) {
  const int32_t p_tp = static_cast<int32_t>(peer.ranks.size());
  if (r.spec.remote.tp_size != p_tp) {
    RecordFailure(r, nullptr, LoadOutcome::kFailedHandshake,
                  FailedPreconditionError(
                      fmt::format("kv_transfer_params.tp_size is {}, engine {} has {} TP ranks",
                                  r.spec.remote.tp_size, r.spec.remote.remote_engine_id, p_tp)));
    return;
  }
  const auto& gens = r.spec.remote.remote_block_generations;
  if (!gens.empty() && gens.size() != r.spec.remote.remote_block_ids.size()) {
    RecordFailure(r, nullptr, LoadOutcome::kFailedTransfer,
                  InvalidArgumentError(fmt::format(
                      "kv_transfer_params: {} remote_block_generations for {} remote_block_ids",
                      gens.size(), r.spec.remote.remote_block_ids.size())));
    return;
  }
  r.posted_at = Deadline::Clock::now();
  for (int32_t d = 0; d < tp_size(); ++d) {
    for (const kv::HeadRead& heads : peer.reads[d]) {
      SourceRead& read = r.reads.emplace_back();
      read.d_rank = d;
      read.heads = heads;
    }
  }
  for (SourceRead& read : r.reads) {
    if (Status st = StartRead(r, read, peer); !st.ok()) {
      // A transfer failure drops the engine's connections (and `peer`): start nothing more.
      RecordFailure(r, &read, KindOf(st), st);
      return;
    }
  }
}

Status FerryConnectorImpl::StartRead(RecvState& r, SourceRead& read, PeerEntry& peer) {
  const HandshakeMetadata& p = peer.ranks[read.heads.src_rank];
  PullRequest req;
  req.remote = {p.Spec(), p.block_size_logical};
  req.local = {ranks_[read.d_rank].spec, block_size_logical_};
  req.local_cache_registered = !config_.use_host_buffer();
  req.remote_block_ids = r.spec.remote.remote_block_ids;
  req.local_block_ids = r.spec.local_block_ids;
  req.token_begin = r.spec.num_local_computed_tokens;
  req.token_end = int64_t{r.spec.num_local_computed_tokens} + r.spec.num_external_tokens;
  req.heads = {read.heads.src_first_head, read.heads.dst_first_head, read.heads.num_heads};
  KVF_ASSIGN_OR_RETURN(read.plan, PlanPull(req));

  const auto& gens = r.spec.remote.remote_block_generations;
  if (!gens.empty()) {
    for (int32_t index : read.plan.remote_logical_index) {
      read.expected_generations.push_back(gens[index]);
    }
  }
  const kv::CacheSpec staging = read.plan.StagingSpec();
  const uint64_t staging_bytes = staging.region_bytes() * staging.num_regions();
  read.generations_offset = (staging_bytes + 7) / 8 * 8;
  read.scratch_bytes =
      read.generations_offset + read.plan.remote_logical_blocks.size() * sizeof(uint64_t);
  RankEndpoint& rank = ranks_[read.d_rank];
  if (rank.scratch_pool == nullptr) {
    rank.scratch_pool =
        std::make_unique<ScratchPool>(rank.agent.get(), kScratchAreasKept, kScratchBytesKept);
  }
  KVF_ASSIGN_OR_RETURN(read.scratch, rank.scratch_pool->Acquire(read.scratch_bytes));
  if (read.expected_generations.empty()) return PostGenerationRead(r, read, peer, false);
  return PostData(read, peer);
}

Status FerryConnectorImpl::PostData(SourceRead& read, PeerEntry& peer) {
  const RankEndpoint& rank = ranks_[read.d_rank];
  std::vector<transfer::RegionHandle> local =
      read.plan.direct ? rank.local_regions
                       : std::vector<transfer::RegionHandle>{read.scratch->region};
  DescriptorPair d = BuildDescriptors(read.plan, peer.remote_regions[read.heads.src_rank], local);
  transfer::TransferRequest req{.op = transfer::XferOp::kRead,
                                .peer = *peer.links[read.d_rank][read.heads.src_rank],
                                .local = std::move(d.local),
                                .remote = std::move(d.remote),
                                .notification = "",
                                .timeout_ms = config_.transfer_timeout_ms};
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, rank.agent->PrepareTransfer(req));
  read.xfer = x;
  KVF_ASSIGN_OR_RETURN(transfer::XferInfo info, rank.agent->GetXferInfo(x));
  read.data_bytes = info.total_bytes;
  read.data_descriptors = info.num_descriptors_merged;
  read.data_by_memcpy = info.by_memcpy;
  read.phase = SourceRead::Phase::kData;
  return rank.agent->Post(x);
}

Status FerryConnectorImpl::PostGenerationRead(const RecvState& r, SourceRead& read, PeerEntry& peer,
                                              bool with_notification) {
  transfer::TransferRequest req{
      .op = transfer::XferOp::kRead,
      .peer = *peer.links[read.d_rank][read.heads.src_rank],
      .local = {},
      .remote = {},
      .notification = with_notification
                          ? EncodePullNotification(r.spec.remote.remote_request_id, tp_size())
                          : std::string(),
      .timeout_ms = config_.transfer_timeout_ms};
  const transfer::RegionHandle table{peer.ranks[read.heads.src_rank].generation_table.id};
  for (size_t i = 0; i < read.plan.remote_logical_blocks.size(); ++i) {
    req.local.push_back(
        {read.scratch->region, read.generations_offset + i * sizeof(uint64_t), sizeof(uint64_t)});
    req.remote.push_back(
        {table,
         static_cast<uint64_t>(read.plan.remote_logical_blocks[i].value()) * sizeof(uint64_t),
         sizeof(uint64_t)});
  }
  transfer::Agent& agent = *ranks_[read.d_rank].agent;
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, agent.PrepareTransfer(req));
  read.xfer = x;
  read.phase =
      with_notification ? SourceRead::Phase::kPostGeneration : SourceRead::Phase::kPreGeneration;
  return agent.Post(x);
}

// One poll of a posted read.
Status FerryConnectorImpl::Advance(RecvState& r, SourceRead& read) {
  transfer::Agent& agent = *ranks_[read.d_rank].agent;
  KVF_ASSIGN_OR_RETURN(transfer::XferState state, agent.Poll(*read.xfer));
  if (state == transfer::XferState::kInProgress) return Status::Ok();
  KVF_RETURN_IF_ERROR(agent.Release(*read.xfer));
  read.xfer.reset();
  auto peer = peers_.find(r.spec.remote.remote_engine_id);
  if (read.phase != SourceRead::Phase::kPostGeneration &&
      (peer == peers_.end() || peer->second.state != PeerEntry::State::kReady)) {
    return UnavailableError("the remote engine's connection was dropped");
  }
  auto read_generations = [&read] {
    std::vector<uint64_t> g(read.plan.remote_logical_blocks.size());
    std::memcpy(g.data(), read.scratch->data.get() + read.generations_offset,
                g.size() * sizeof(uint64_t));
    return g;
  };
  switch (read.phase) {
    case SourceRead::Phase::kPreGeneration:
      read.expected_generations = read_generations();
      return PostData(read, peer->second);
    case SourceRead::Phase::kData: {
      KVF_LOG_DEBUG("connector {}: rank {} pulled {} bytes in {} descriptors from rank {} for {}",
                    engine_id_, read.d_rank, read.data_bytes, read.data_descriptors,
                    read.heads.src_rank, r.spec.request_id);
      if (after_data_read_for_test) after_data_read_for_test(r.spec.request_id);
      peer = peers_.find(r.spec.remote.remote_engine_id);
      if (peer == peers_.end())
        return UnavailableError("the remote engine's connection was dropped");
      return PostGenerationRead(r, read, peer->second, true);
    }
    case SourceRead::Phase::kPostGeneration: {
      // The read carried the notification: the P rank has it whatever the check says.
      UpdateStats([](ConnectorStats& s) { ++s.notifications_sent; });
      std::vector<uint64_t> now = read_generations();
      for (size_t i = 0; i < now.size(); ++i) {
        if (now[i] != read.expected_generations[i]) {
          return DataLossError(fmt::format(
              "P's logical block {} changed generation {} -> {} (lease ran out, block reused)",
              read.plan.remote_logical_blocks[i].value(), read.expected_generations[i], now[i]));
        }
      }
      return FinishRead(r, read);
    }
    case SourceRead::Phase::kDone:
    case SourceRead::Phase::kFailed:
      break;
  }
  return InternalError("read polled in the wrong phase");
}

// A checked read: a staged one is re-laid out into its D rank's cache (its heads only).
Status FerryConnectorImpl::FinishRead(RecvState& r, SourceRead& read) {
  if (!read.plan.direct && r.failure == std::nullopt) {
    const kv::CacheSpec staged = read.plan.StagingSpec();
    kv::KvSourceView src{staged, {}, read.plan.staging_block_table};
    for (int32_t reg = 0; reg < staged.num_regions(); ++reg) {
      src.regions.push_back(read.scratch->data.get() + reg * staged.region_bytes());
    }
    std::vector<kv::KernelBlockId> table = geometry_->ExpandBlockTable(r.spec.local_block_ids);
    kv::KvDestView dst = kv::DestViewOf(*ranks_[read.d_rank].cache, table);
    KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, read.plan.token_begin, read.plan.token_end,
                                           {0, read.heads.dst_first_head, read.heads.num_heads}));
  }
  read.phase = SourceRead::Phase::kDone;
  ReleaseScratch(read);
  return Status::Ok();
}

void FerryConnectorImpl::RecordFailure(RecvState& r, SourceRead* read, LoadOutcome kind,
                                       const Status& why) {
  KVF_LOG_WARN("connector {}: KV load of {} from {}{} failed ({}): {}", engine_id_,
               r.spec.request_id, r.spec.remote.remote_engine_id,
               read == nullptr
                   ? std::string()
                   : fmt::format(" (rank {} from rank {})", read->d_rank, read->heads.src_rank),
               LoadOutcomeName(kind), why.ToString());
  if (kind == LoadOutcome::kFailedTransfer || kind == LoadOutcome::kFailedDeadline) {
    // The transport may still write into this load's memory until the connection is closed
    // (agent.h, poisoning rule): close every connection to that engine before the blocks or
    // the staging areas are reused. Its other reads in flight then fail (Aborted) too.
    DropPeer(r.spec.remote.remote_engine_id);
  }
  if (read != nullptr) {
    if (read->xfer.has_value()) {
      ranks_[read->d_rank].agent->Release(*read->xfer).IgnoreError();
      read->xfer.reset();
    }
    read->phase = SourceRead::Phase::kFailed;
    ReleaseScratch(*read);
  }
  if (!r.failure.has_value()) {
    r.failure = kind;
    r.failure_status = why;
  }
}

bool FerryConnectorImpl::InFlight(const RecvState& r) const {
  return std::any_of(r.reads.begin(), r.reads.end(),
                     [](const SourceRead& read) { return read.xfer.has_value(); });
}

void FerryConnectorImpl::PollLoads() {
  for (auto& [id, r] : recvs_) {
    for (SourceRead& read : r.reads) {
      // A phase that ends at once (a READ of mapped memory is done when posted) is followed
      // by the next in this same pass, not one engine step later.
      while (read.xfer.has_value()) {
        const SourceRead::Phase phase = read.phase;
        Status st = Advance(r, read);
        if (!st.ok()) {
          RecordFailure(
              r, &read,
              phase == SourceRead::Phase::kPostGeneration && st.code() == StatusCode::kDataLoss
                  ? LoadOutcome::kFailedGeneration
                  : KindOf(st),
              st);
          break;
        }
        if (read.phase == phase) break;  // still in flight
      }
    }
  }
  // A load ends when none of its reads is in flight any more.
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    auto next = std::next(it);
    RecvState& r = it->second;
    if (r.started && !InFlight(r)) {
      if (r.failure.has_value()) {
        FailLoad(it->first, r);
      } else {
        FinishLoad(it->first, r);
      }
    }
    it = next;
  }
}

void FerryConnectorImpl::FinishLoad(const std::string& id, RecvState& r) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Deadline::Clock::now() - r.posted_at)
          .count();
  const LoadReport report = ReportOf(id, r, LoadOutcome::kPulled, tp_size());
  UpdateStats([&](ConnectorStats& s) {
    ++s.transfers;
    s.tokens += static_cast<uint64_t>(r.spec.num_external_tokens);
    s.bytes += report.bytes;
    s.descriptors += report.descriptors;
    s.bytes_by_memcpy += report.bytes_by_memcpy;
    s.duration_us_total += static_cast<uint64_t>(us);
  });
  if (aborted_loads_.count(id) != 0) {
    pending_out_.finished_sending.push_back(id);
  } else {
    pending_out_.finished_recving.push_back(id);
    pending_out_.load_reports.push_back(report);
  }
  recvs_.erase(id);
}

void FerryConnectorImpl::FailLoad(const std::string& id, RecvState& r) {
  const LoadOutcome kind = *r.failure;
  KVF_LOG_WARN("connector {}: KV load of {} failed ({}): {}; invalid logical blocks [{}]",
               engine_id_, id, LoadOutcomeName(kind), r.failure_status.ToString(),
               IdsToString(r.invalid_on_failure));
  for (SourceRead& read : r.reads) ReleaseScratch(read);
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
  if (kind == LoadOutcome::kFailedTransfer || kind == LoadOutcome::kFailedDeadline) {
    // Some P ranks never got this load's notification (their reads failed or were cut off):
    // tell P to end the lease on every rank now rather than at lease end.
    ReleaseRemoteAsync(r.spec.remote);
  }
  if (aborted_loads_.count(id) != 0) {
    pending_out_.finished_sending.push_back(id);
  } else {
    pending_out_.finished_recving.push_back(id);
    pending_out_.invalid_block_ids.insert(pending_out_.invalid_block_ids.end(),
                                          r.invalid_on_failure.begin(), r.invalid_on_failure.end());
    pending_out_.load_reports.push_back(ReportOf(id, r, kind, tp_size()));
  }
  recvs_.erase(id);
}

// Back to the rank's pool. After a transfer failure the caller has closed the connection first.
void FerryConnectorImpl::ReleaseScratch(SourceRead& read) {
  if (!read.scratch.has_value()) return;
  ranks_[read.d_rank].scratch_pool->GiveBack(std::move(*read.scratch));
  read.scratch.reset();
}

void FerryConnectorImpl::DropPeer(const std::string& engine_id) {
  auto it = peers_.find(engine_id);
  if (it == peers_.end() || it->second.state != PeerEntry::State::kReady) return;
  for (int32_t d = 0; d < static_cast<int32_t>(it->second.links.size()); ++d) {
    for (const auto& link : it->second.links[d]) {
      if (link.has_value()) ranks_[d].agent->RemovePeer(*link).IgnoreError();
    }
  }
  peers_.erase(it);
}

}  // namespace kvferry::connector::internal
