// The Consumer's loads: per-rank pulls, generation checks, failures (consumer.h has the phases).
#include "connector/consumer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

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
                    const Registration& reg) {
  LoadReport report;
  report.request_id = id;
  report.outcome = outcome;
  report.local_hit_tokens = r.spec.num_local_computed_tokens;
  if (outcome != LoadOutcome::kPulled) return report;
  report.tokens = r.spec.num_external_tokens;
  report.ranks.resize(static_cast<size_t>(reg.tp_size()));
  for (int32_t d = 0; d < reg.tp_size(); ++d) report.ranks[d].rank = reg.EngineRank(d);
  for (const SourceRead& read : r.reads) {
    RankLoad& rank = report.ranks[read.d_rank];
    rank.source_ranks.push_back(read.heads.src_rank);
    rank.bytes += read.data_bytes;
    rank.descriptors += read.data_descriptors;
    report.bytes += read.data_bytes;
    report.descriptors += read.data_descriptors;
    if (read.data_by_memcpy) report.bytes_by_memcpy += read.data_bytes;
    report.staged |= !read.plan.direct;
  }
  return report;
}

LoadOutcome KindOf(const Status& st) {
  return st.code() == StatusCode::kDeadlineExceeded ? LoadOutcome::kFailedDeadline
                                                    : LoadOutcome::kFailedTransfer;
}

void CountFailure(LoadOutcome kind, ConnectorStats& s) {
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
}

}  // namespace

Consumer::Consumer(ConnectorContext* ctx, Registration* registration, RemoteReleaser* releaser,
                   const AfterDataReadHook* after_data_read)
    : ctx_(ctx), reg_(registration), releaser_(releaser), after_data_read_(after_data_read) {}

Consumer::~Consumer() { Shutdown(); }

void Consumer::Bind(std::span<const LoadSpec> loads) {
  bound_loads_.insert(bound_loads_.end(), loads.begin(), loads.end());
}

bool Consumer::AbortIfReading(const std::string& id) {
  const bool bound = std::any_of(bound_loads_.begin(), bound_loads_.end(),
                                 [&](const LoadSpec& l) { return l.request_id == id; });
  if (recvs_.count(id) == 0 && !bound) return false;
  aborted_loads_.insert(id);
  return true;
}

void Consumer::Start() {
  if (!reg_->registered()) return;
  for (LoadSpec& spec : bound_loads_) {
    RecvState r;
    r.invalid_on_failure = LocalBlocksForTokens(
        spec.local_block_ids, reg_->block_size_logical(), spec.num_local_computed_tokens,
        int64_t{spec.num_local_computed_tokens} + spec.num_external_tokens);
    r.spec = std::move(spec);
    EnsureHandshake(r.spec.remote);
    const std::string id = r.spec.request_id;
    if (!recvs_.emplace(id, std::move(r)).second) {
      KVF_LOG_ERROR("connector {}: second load for request {} ignored", ctx_->engine_id, id);
    }
  }
  bound_loads_.clear();
  AdvanceHandshakes();
  for (auto& [id, r] : recvs_) {
    if (r.started) continue;
    auto peer = peers_.find(r.spec.remote.remote_engine_id);
    if (peer != peers_.end() && peer->second.state == PeerEntry::State::kReady &&
        (peer->second.host != r.spec.remote.remote_host ||
         peer->second.port != r.spec.remote.remote_port)) {
      // The engine answers on another side channel now: it restarted (same engine id, new
      // process). Its old connection would fail the pull; handshake with the new one.
      KVF_LOG_INFO("connector {}: {} moved to {}:{}; handshaking again", ctx_->engine_id,
                   r.spec.remote.remote_engine_id, r.spec.remote.remote_host,
                   r.spec.remote.remote_port);
      DropPeer(r.spec.remote.remote_engine_id);
      peer = peers_.end();
    }
    if (peer == peers_.end()) {
      // Its engine was dropped (a sibling's transfer failed, or it moved) before this load
      // started.
      EnsureHandshake(r.spec.remote);
      continue;
    }
    if (peer->second.state != PeerEntry::State::kReady) continue;
    r.started = true;
    StartPull(r, peer->second);
  }
  PollLoads();
}

void Consumer::Poll(ConnectorOutput* out) {
  PollLoads();
  auto append = [](auto& to, auto& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(out->finished_sending, out_.finished_sending);
  append(out->finished_recving, out_.finished_recving);
  append(out->invalid_block_ids, out_.invalid_block_ids);
  append(out->load_reports, out_.load_reports);
  out_ = ConnectorOutput();
}

Status Consumer::CheckPullParams(const RecvState& r, const PeerEntry& peer) const {
  const int32_t p_tp = static_cast<int32_t>(peer.ranks.size());
  if (r.spec.remote.tp_size != p_tp) {
    return FailedPreconditionError(
        fmt::format("kv_transfer_params.tp_size is {}, engine {} has {} TP ranks",
                    r.spec.remote.tp_size, r.spec.remote.remote_engine_id, p_tp));
  }
  const auto& gens = r.spec.remote.remote_block_generations;
  if (!gens.empty() && gens.size() != r.spec.remote.remote_block_ids.size()) {
    return InvalidArgumentError(
        fmt::format("kv_transfer_params: {} remote_block_generations for {} remote_block_ids",
                    gens.size(), r.spec.remote.remote_block_ids.size()));
  }
  return Status::Ok();
}

// Plans and posts every read of a load; a failure is recorded on the load (the reads already
// posted run to their end, or are cut off with the engine's connections).
void Consumer::StartPull(RecvState& r, PeerEntry& peer) {
  if (Status st = CheckPullParams(r, peer); !st.ok()) {
    RecordFailure(r, nullptr,
                  st.code() == StatusCode::kFailedPrecondition ? LoadOutcome::kFailedHandshake
                                                               : LoadOutcome::kFailedTransfer,
                  st);
    return;
  }
  r.posted_at = Deadline::Clock::now();
  // A split P's replicas no D rank reads would hold their share of the lease to its end: D's
  // rank 0 releases them now.
  if (reg_->first_rank() == 0) {
    for (int32_t p : peer.unread_ranks) releaser_->Release(r.spec.remote, p);
  }
  for (int32_t d = 0; d < reg_->tp_size(); ++d) {
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

ScratchPool& Consumer::PoolOf(int32_t d_rank) {
  if (scratch_pools_.empty()) scratch_pools_.resize(static_cast<size_t>(reg_->tp_size()));
  std::unique_ptr<ScratchPool>& pool = scratch_pools_[d_rank];
  if (pool == nullptr) {
    pool = std::make_unique<ScratchPool>(reg_->rank(d_rank).agent.get(), kScratchAreasKept,
                                         kScratchBytesKept);
  }
  return *pool;
}

Status Consumer::StartRead(RecvState& r, SourceRead& read, PeerEntry& peer) {
  const HandshakeMetadata& p = peer.ranks[read.heads.src_rank];
  PullRequest req;
  req.remote = {p.Spec(), p.block_size_logical};
  req.local = {reg_->rank(read.d_rank).spec, reg_->block_size_logical()};
  req.local_cache_registered = !ctx_->config.use_host_buffer();
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
  KVF_ASSIGN_OR_RETURN(read.scratch, PoolOf(read.d_rank).Acquire(read.scratch_bytes));
  if (read.expected_generations.empty()) return PostGenerationRead(r, read, peer, false);
  return PostData(read, peer);
}

Status Consumer::PostData(SourceRead& read, PeerEntry& peer) {
  const RankEndpoint& rank = reg_->rank(read.d_rank);
  std::vector<transfer::RegionHandle> local =
      read.plan.direct ? rank.local_regions
                       : std::vector<transfer::RegionHandle>{read.scratch->region};
  DescriptorPair d = BuildDescriptors(read.plan, peer.remote_regions[read.heads.src_rank], local);
  transfer::TransferRequest req{.op = transfer::XferOp::kRead,
                                .peer = *peer.links[read.d_rank][read.heads.src_rank],
                                .local = std::move(d.local),
                                .remote = std::move(d.remote),
                                .notification = "",
                                .timeout_ms = ctx_->config.transfer_timeout_ms};
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, rank.agent->PrepareTransfer(req));
  read.xfer = x;
  KVF_ASSIGN_OR_RETURN(transfer::XferInfo info, rank.agent->GetXferInfo(x));
  read.data_bytes = info.total_bytes;
  read.data_descriptors = info.num_descriptors_merged;
  read.data_by_memcpy = info.by_memcpy;
  read.phase = SourceRead::Phase::kData;
  return rank.agent->Post(x);
}

Status Consumer::PostGenerationRead(const RecvState& r, SourceRead& read, PeerEntry& peer,
                                    bool with_notification) {
  transfer::TransferRequest req{
      .op = transfer::XferOp::kRead,
      .peer = *peer.links[read.d_rank][read.heads.src_rank],
      .local = {},
      .remote = {},
      .notification = with_notification ? EncodePullNotification(r.spec.remote.remote_request_id,
                                                                 reg_->engine_tp_size())
                                        : std::string(),
      .timeout_ms = ctx_->config.transfer_timeout_ms};
  const transfer::RegionHandle table{peer.ranks[read.heads.src_rank].generation_table.id};
  for (size_t i = 0; i < read.plan.remote_logical_blocks.size(); ++i) {
    req.local.push_back(
        {read.scratch->region, read.generations_offset + i * sizeof(uint64_t), sizeof(uint64_t)});
    req.remote.push_back(
        {table,
         static_cast<uint64_t>(read.plan.remote_logical_blocks[i].value()) * sizeof(uint64_t),
         sizeof(uint64_t)});
  }
  transfer::Agent& agent = *reg_->rank(read.d_rank).agent;
  KVF_ASSIGN_OR_RETURN(transfer::XferHandle x, agent.PrepareTransfer(req));
  read.xfer = x;
  read.phase =
      with_notification ? SourceRead::Phase::kPostGeneration : SourceRead::Phase::kPreGeneration;
  return agent.Post(x);
}

namespace {

std::vector<uint64_t> GenerationsRead(const SourceRead& read) {
  std::vector<uint64_t> g(read.plan.remote_logical_blocks.size());
  std::memcpy(g.data(), read.scratch->data.get() + read.generations_offset,
              g.size() * sizeof(uint64_t));
  return g;
}

}  // namespace

// One poll of a posted read.
Status Consumer::Advance(RecvState& r, SourceRead& read) {
  transfer::Agent& agent = *reg_->rank(read.d_rank).agent;
  KVF_ASSIGN_OR_RETURN(transfer::XferState state, agent.Poll(*read.xfer));
  if (state == transfer::XferState::kInProgress) return Status::Ok();
  KVF_RETURN_IF_ERROR(agent.Release(*read.xfer));
  read.xfer.reset();
  auto peer = peers_.find(r.spec.remote.remote_engine_id);
  if (read.phase != SourceRead::Phase::kPostGeneration &&
      (peer == peers_.end() || peer->second.state != PeerEntry::State::kReady)) {
    return UnavailableError("the remote engine's connection was dropped");
  }
  switch (read.phase) {
    case SourceRead::Phase::kPreGeneration:
      read.expected_generations = GenerationsRead(read);
      return PostData(read, peer->second);
    case SourceRead::Phase::kData:
      KVF_LOG_DEBUG("connector {}: rank {} pulled {} bytes in {} descriptors from rank {} for {}",
                    ctx_->engine_id, reg_->EngineRank(read.d_rank), read.data_bytes,
                    read.data_descriptors, read.heads.src_rank, r.spec.request_id);
      if (*after_data_read_) (*after_data_read_)(r.spec.request_id);
      peer = peers_.find(r.spec.remote.remote_engine_id);
      if (peer == peers_.end())
        return UnavailableError("the remote engine's connection was dropped");
      return PostGenerationRead(r, read, peer->second, true);
    case SourceRead::Phase::kPostGeneration:
      // The read carried the notification: the P rank has it whatever the check says.
      ctx_->stats.Update([](ConnectorStats& s) { ++s.notifications_sent; });
      KVF_RETURN_IF_ERROR(CheckGenerations(read));
      return FinishRead(r, read);
    case SourceRead::Phase::kDone:
    case SourceRead::Phase::kFailed:
      break;
  }
  return InternalError("read polled in the wrong phase");
}

Status Consumer::CheckGenerations(const SourceRead& read) const {
  const std::vector<uint64_t> now = GenerationsRead(read);
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] != read.expected_generations[i]) {
      return DataLossError(fmt::format(
          "P's logical block {} changed generation {} -> {} (lease ran out, block reused)",
          read.plan.remote_logical_blocks[i].value(), read.expected_generations[i], now[i]));
    }
  }
  return Status::Ok();
}

// A checked read: a staged one is re-laid out into its D rank's cache (its heads only).
Status Consumer::FinishRead(RecvState& r, SourceRead& read) {
  if (!read.plan.direct && r.failure == std::nullopt) {
    const kv::CacheSpec staged = read.plan.StagingSpec();
    kv::KvSourceView src{staged, {}, read.plan.staging_block_table};
    for (int32_t reg = 0; reg < staged.num_regions(); ++reg) {
      src.regions.push_back(read.scratch->data.get() + reg * staged.region_bytes());
    }
    std::vector<kv::KernelBlockId> table =
        reg_->geometry().ExpandBlockTable(r.spec.local_block_ids);
    kv::KvDestView dst = kv::DestViewOf(*reg_->rank(read.d_rank).cache, table);
    KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, read.plan.token_begin, read.plan.token_end,
                                           {0, read.heads.dst_first_head, read.heads.num_heads}));
  }
  read.phase = SourceRead::Phase::kDone;
  ReleaseScratch(read);
  return Status::Ok();
}

void Consumer::RecordFailure(RecvState& r, SourceRead* read, LoadOutcome kind, const Status& why) {
  KVF_LOG_WARN("connector {}: KV load of {} from {}{} failed ({}): {}", ctx_->engine_id,
               r.spec.request_id, r.spec.remote.remote_engine_id,
               read == nullptr ? std::string()
                               : fmt::format(" (rank {} from rank {})",
                                             reg_->EngineRank(read->d_rank), read->heads.src_rank),
               LoadOutcomeName(kind), why.ToString());
  if (kind == LoadOutcome::kFailedTransfer || kind == LoadOutcome::kFailedDeadline) {
    // The transport may still write into this load's memory until the connection is closed
    // (agent.h, poisoning rule): close every connection to that engine before the blocks or
    // the staging areas are reused. Its other reads in flight then fail (Aborted) too.
    DropPeer(r.spec.remote.remote_engine_id);
  }
  if (read != nullptr) {
    if (read->xfer.has_value()) {
      reg_->rank(read->d_rank).agent->Release(*read->xfer).IgnoreError();
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

bool Consumer::InFlight(const RecvState& r) const {
  return std::any_of(r.reads.begin(), r.reads.end(),
                     [](const SourceRead& read) { return read.xfer.has_value(); });
}

// A phase that ends at once (a READ of mapped memory is done when posted) is followed by the
// next in this same pass, not one engine step later.
void Consumer::PollRead(RecvState& r, SourceRead& read) {
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
      return;
    }
    if (read.phase == phase) return;  // still in flight
  }
}

void Consumer::PollLoads() {
  for (auto& [id, r] : recvs_) {
    for (SourceRead& read : r.reads) PollRead(r, read);
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

bool Consumer::ReportAborted(const std::string& id) {
  if (aborted_loads_.erase(id) == 0) return false;
  out_.finished_sending.push_back(id);
  return true;
}

void Consumer::FinishLoad(const std::string& id, RecvState& r) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Deadline::Clock::now() - r.posted_at)
          .count();
  LoadReport report = ReportOf(id, r, LoadOutcome::kPulled, *reg_);
  report.pull_ms = static_cast<double>(us) / 1000.0;
  ctx_->stats.Update([&](ConnectorStats& s) {
    ++s.transfers;
    s.tokens += static_cast<uint64_t>(r.spec.num_external_tokens);
    s.bytes += report.bytes;
    s.descriptors += report.descriptors;
    s.bytes_by_memcpy += report.bytes_by_memcpy;
    s.duration_us_total += static_cast<uint64_t>(us);
  });
  if (!ReportAborted(id)) {
    out_.finished_recving.push_back(id);
    out_.load_reports.push_back(report);
  }
  recvs_.erase(id);
}

void Consumer::FailLoad(const std::string& id, RecvState& r) {
  const LoadOutcome kind = *r.failure;
  KVF_LOG_WARN("connector {}: KV load of {} failed ({}): {}; invalid logical blocks [{}]",
               ctx_->engine_id, id, LoadOutcomeName(kind), r.failure_status.ToString(),
               IdsToString(r.invalid_on_failure));
  for (SourceRead& read : r.reads) ReleaseScratch(read);
  ctx_->stats.Update([kind](ConnectorStats& s) { CountFailure(kind, s); });
  if (kind == LoadOutcome::kFailedTransfer || kind == LoadOutcome::kFailedDeadline) {
    // Some P ranks never got this load's notification (their reads failed or were cut off):
    // tell P to end the lease on every rank now rather than at lease end.
    releaser_->Release(r.spec.remote);
  }
  if (!ReportAborted(id)) {
    out_.finished_recving.push_back(id);
    out_.invalid_block_ids.insert(out_.invalid_block_ids.end(), r.invalid_on_failure.begin(),
                                  r.invalid_on_failure.end());
    LoadReport report = ReportOf(id, r, kind, *reg_);
    report.error = r.failure_status.ToString();
    out_.load_reports.push_back(std::move(report));
  }
  recvs_.erase(id);
}

// Back to the rank's pool. After a transfer failure the caller has closed the connection first.
void Consumer::ReleaseScratch(SourceRead& read) {
  if (!read.scratch.has_value()) return;
  scratch_pools_[read.d_rank]->GiveBack(std::move(*read.scratch));
  read.scratch.reset();
}

void Consumer::Shutdown() {
  for (auto& [engine, peer] : peers_) {
    if (peer.job != nullptr && peer.job->thread.joinable()) peer.job->thread.join();
  }
  for (auto& [id, r] : recvs_) {
    for (SourceRead& read : r.reads) {
      if (read.xfer.has_value()) reg_->rank(read.d_rank).agent->Release(*read.xfer).IgnoreError();
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
  scratch_pools_.clear();  // deregisters, while the agents live
}

}  // namespace kvferry::connector::internal
