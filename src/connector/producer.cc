// P's side: host-buffer staging (every rank's cache into its own host buffer), the offer of a
// finished request's blocks under a lease, and the lease's end — by D's notifications, counted
// per P rank, by a side-channel release, or by expiry.
#include "connector/producer.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "connector/handshake_wire.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {

void Producer::OnTokensComputed(const RequestView& request,
                                std::span<const kv::LogicalBlockId> block_ids, int32_t token_begin,
                                int32_t token_end) {
  // Every chunk of a chunked prefill is staged (vLLM #30358 staged only the first).
  auto [it, inserted] =
      computed_.try_emplace(request.request_id, ComputedRange{token_begin, token_end});
  if (!inserted) {
    if (token_begin != it->second.end) it->second.first = token_begin;  // re-admitted
    it->second.end = token_end;
  }
  pending_saves_.push_back({request.request_id,
                            std::vector<kv::LogicalBlockId>(block_ids.begin(), block_ids.end()),
                            token_begin, token_end});
}

FinishResult Producer::Finish(const RequestView& request,
                              std::span<const kv::LogicalBlockId> block_ids) {
  const std::string& id = request.request_id;
  if (!reg_->registered()) {
    KVF_LOG_ERROR("connector {}: request {} finished before RegisterKvCache", ctx_->engine_id, id);
    return {};
  }
  // Host buffer: chunks computed this step are staged before the lease is granted, so D can
  // never read a host block P has not written yet.
  if (ctx_->config.use_host_buffer()) QueueCachedPrefix(request, block_ids);
  StagePendingSaves(&id);
  // A request that ended by itself (eos, a stop token) is P's whole answer: no D will read it.
  FinishResult result =
      OfferBlocks(request, request.generation_ended ? block_ids.first(0) : block_ids);
  // P of a prefill-only request (one token generated): a D resumes after that token.
  const int32_t generated = request.num_tokens - static_cast<int32_t>(request.prompt_tokens.size());
  if (result.kv_transfer_params && request.first_token != nullptr && generated == 1) {
    result.kv_transfer_params->first_token = *request.first_token;
  }
  return result;
}

// Tokens served by P's prefix cache were computed by another request, which may never have been
// staged: they are staged for this one too.
void Producer::QueueCachedPrefix(const RequestView& request,
                                 std::span<const kv::LogicalBlockId> block_ids) {
  auto first = computed_.find(request.request_id);
  const int32_t prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
  const int32_t cached_end =
      first == computed_.end() ? prompt_len : std::min(first->second.first, prompt_len);
  if (cached_end > 0 && !block_ids.empty()) {
    pending_saves_.push_back({request.request_id,
                              std::vector<kv::LogicalBlockId>(block_ids.begin(), block_ids.end()),
                              0, cached_end});
  }
  if (first != computed_.end()) computed_.erase(first);
}

void Producer::StagePendingSaves(const std::string* only_request) {
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
                    ctx_->engine_id, s.request_id, s.token_begin, s.token_end, st.ToString());
      auto [it, inserted] = stage_failed_from_.try_emplace(s.request_id, s.token_begin);
      if (!inserted) it->second = std::min(it->second, s.token_begin);
      ctx_->stats.Update([](ConnectorStats& st) { ++st.stage_failures; });
    }
  }
  pending_saves_ = std::move(keep);
}

Status Producer::StageOne(const PendingSave& s) {
  if (*stage_fault_ && (*stage_fault_)(s.request_id, s.token_begin)) {
    return InternalError("injected staging fault");
  }
  // Same geometry both sides: each rank's host buffer mirrors its cache kernel block for kernel
  // block, addressed by the same kernel ids (the mapping of the request's logical ids).
  const kv::BlockGeometry& geometry = reg_->geometry();
  std::vector<kv::KernelBlockId> table = geometry.ExpandBlockTable(s.block_ids);
  for (int32_t r = 0; r < reg_->tp_size(); ++r) {
    RankEndpoint& rank = reg_->rank(r);
    kv::KvSourceView src = kv::SourceViewOf(*rank.cache, table);
    kv::KvDestView dst{rank.spec, rank.host_regions, table};
    KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, s.token_begin, s.token_end));
  }
  const int32_t k = geometry.block_size_kernel();
  const uint64_t blocks = s.token_end > s.token_begin
                              ? static_cast<uint64_t>((s.token_end - 1) / k - s.token_begin / k + 1)
                              : 0;
  ctx_->stats.Update([&](ConnectorStats& st) { st.staged_kernel_blocks += blocks; });
  return Status::Ok();
}

size_t Producer::OfferableAfterStagingFailure(const std::string& id, size_t num_blocks,
                                              Status* error) {
  auto failed = stage_failed_from_.find(id);
  if (failed == stage_failed_from_.end()) return num_blocks;
  const int32_t first_bad = failed->second;
  stage_failed_from_.erase(failed);
  if (ctx_->config.kv_load_failure_policy == KvLoadFailurePolicy::kFail) {
    ctx_->stats.Update([&](ConnectorStats& s) { s.blocks_withheld += num_blocks; });
    *error = DataLossError(
        fmt::format("request {}: its KV could not be staged for the remote decoder from token "
                    "{} on (kv_load_failure_policy fail)",
                    id, first_bad));
    return 0;
  }
  // Only whole logical blocks before the first bad token; D computes the rest itself.
  const size_t offered =
      std::min(num_blocks, static_cast<size_t>(first_bad / reg_->block_size_logical()));
  const uint64_t withheld = num_blocks - offered;
  ctx_->stats.Update([withheld](ConnectorStats& s) { s.blocks_withheld += withheld; });
  KVF_LOG_WARN("connector {}: request {}: offering {} of {} blocks (staging failed at token {})",
               ctx_->engine_id, id, offered, num_blocks, first_bad);
  return offered;
}

KvTransferParams Producer::ParamsFor(const RequestView& request, size_t offered_blocks) const {
  const int32_t prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
  KvTransferParams out;
  out.do_remote_prefill = true;
  out.remote_engine_id = ctx_->engine_id;
  out.remote_request_id = request.request_id;
  out.remote_host = ctx_->config.side_channel_host;
  out.remote_port = reg_->side_channel_port();
  out.tp_size = reg_->engine_tp_size();
  out.remote_num_tokens =
      std::min(prompt_len, static_cast<int32_t>(offered_blocks) * reg_->block_size_logical());
  return out;
}

FinishResult Producer::OfferBlocks(const RequestView& request,
                                   std::span<const kv::LogicalBlockId> block_ids) {
  const std::string& id = request.request_id;
  FinishResult result;
  const size_t offered = OfferableAfterStagingFailure(id, block_ids.size(), &result.error);
  if (!result.error.ok()) return result;
  KvTransferParams out = ParamsFor(request, offered);
  if (offered == 0) {  // nothing held for D
    result.kv_transfer_params = std::move(out);
    return result;
  }
  const std::span<const kv::LogicalBlockId> leased = block_ids.first(offered);
  std::optional<std::vector<uint64_t>> gens = GrantLease(id, leased);
  if (!gens) return {};
  out.remote_block_ids.assign(leased.begin(), leased.end());  // LOGICAL ids, P's geometry
  out.remote_block_generations = std::move(*gens);
  pending_holds_.push_back(id);
  result.delay_free_blocks = true;
  result.kv_transfer_params = std::move(out);
  return result;
}

std::optional<std::vector<uint64_t>> Producer::GrantLease(
    const std::string& request_id, std::span<const kv::LogicalBlockId> block_ids) {
  StatusOr<std::vector<uint64_t>> gens =
      reg_->leases().Grant(request_id, block_ids, Deadline::AfterMs(ctx_->config.lease_ms));
  if (!gens.ok()) {
    KVF_LOG_ERROR("connector {}: cannot hold blocks of {}: {}", ctx_->engine_id, request_id,
                  gens.status().ToString());
    return std::nullopt;
  }
  const int64_t held = reg_->leases().blocks_held();
  ctx_->stats.Update([held](ConnectorStats& s) {
    ++s.leases_granted;
    s.blocks_held = held;
  });
  return std::move(*gens);
}

std::vector<std::string> Producer::TakeHolds() {
  std::vector<std::string> holds = std::move(pending_holds_);
  pending_holds_.clear();
  return holds;
}

void Producer::Poll(ConnectorOutput* out) {
  if (!reg_->registered()) return;
  std::vector<std::string> released;
  {
    MutexLock lock(&released_mu_);
    released.swap(released_);
  }
  for (std::string& id : released) NoteRelease(std::move(id), out);
  for (std::string& id : release_at_poll_) EndLease(id, out);
  release_at_poll_.clear();
  for (int32_t r = 0; r < reg_->tp_size(); ++r) {
    for (const transfer::Notification& n : reg_->rank(r).agent->GetNotifications()) {
      NoteNotification(r, n, out);
    }
  }
  std::vector<Early> replay = std::move(replay_at_poll_);
  replay_at_poll_.clear();
  for (const Early& e : replay) NoteNotification(e.rank, e.notification, out);
  EndFailedHolds(out);
  ForgetOld();
  for (std::string& id : reg_->leases().EndExpired()) {
    KVF_LOG_WARN(
        "connector {}: lease of request {} expired after {} ms without every notification; "
        "freeing its blocks",
        ctx_->engine_id, id, ctx_->config.lease_ms);
    ctx_->stats.Update([](ConnectorStats& s) { ++s.leases_expired; });
    heard_.erase(id);
    NoteEnded(id);
    out->finished_sending.push_back(std::move(id));
  }
  const int64_t held = reg_->leases().blocks_held();
  ctx_->stats.Update([held](ConnectorStats& s) { s.blocks_held = held; });
}

void Producer::NoteNotification(int32_t rank, const transfer::Notification& n,
                                ConnectorOutput* out) {
  StatusOr<PullNotification> parsed = DecodePullNotification(n.message);
  const bool live = parsed.ok() && reg_->leases().Has(parsed->request_id);
  if (parsed.ok() && !live && ended_.contains(parsed->request_id)) {
    // Late: the lease already ended (expired, released, read by another D); nothing to free.
    KVF_LOG_DEBUG("connector {}: late notification for {} from {}", ctx_->engine_id,
                  parsed->request_id, n.peer_name);
    ctx_->stats.Update([](ConnectorStats& s) { ++s.notifications_late; });
    return;
  }
  if (parsed.ok() && !live && ctx_->options.external_scheduler) {
    RememberEarly(rank, parsed->request_id, n);
    return;
  }
  if (!live) {
    KVF_LOG_WARN("connector {}: notification '{}' from {} to rank {} matches no lease ({})",
                 ctx_->engine_id, n.message, n.peer_name, rank,
                 parsed.ok() ? "ended long ago, or never ours" : parsed.status().ToString());
    return;
  }
  const std::string& id = parsed->request_id;
  const kv::HeadSharding& sharding = reg_->sharding();
  StatusOr<kv::HeadSharding> reader =
      kv::HeadSharding::Create(sharding.num_kv_heads(), parsed->d_tp_size);
  if (!reader.ok()) {
    KVF_LOG_WARN("connector {}: notification for {} names D tp_size {}: {}", ctx_->engine_id, id,
                 parsed->d_tp_size, reader.status().ToString());
    return;
  }
  Heard& heard = heard_[id];
  heard.per_rank.resize(static_cast<size_t>(reg_->tp_size()));
  heard.d_tp_size = parsed->d_tp_size;
  if (!heard.per_rank[rank].insert(n.peer_name).second) {
    // The same agent again (a retried post, or a peer repeating itself): it stands for one D
    // rank only, so it cannot end the shares of the ranks that have not read yet.
    KVF_LOG_WARN("connector {}: notification for {} from {} to rank {} again; ignored",
                 ctx_->engine_id, id, n.peer_name, rank);
    ctx_->stats.Update([](ConnectorStats& s) { ++s.notifications_duplicate; });
    return;
  }
  // Each P rank's share of the lease ends once every D rank reading from it has notified (a
  // replica no D rank reads from has nothing to wait for); the lease ends with the last share.
  for (int32_t p = 0; p < reg_->tp_size(); ++p) {
    if (static_cast<int32_t>(heard.per_rank[p].size()) <
        kv::CountReaders(sharding, *reader, reg_->EngineRank(p)).value()) {
      return;
    }
  }
  EndLease(id, out);
}

void Producer::EndLease(const std::string& request_id, ConnectorOutput* out) {
  heard_.erase(request_id);
  if (!reg_->leases().End(request_id).ok()) return;  // already ended (expired, released twice)
  NoteEnded(request_id);
  out->finished_sending.push_back(request_id);
  ctx_->stats.Update([](ConnectorStats& s) { ++s.leases_released_by_notification; });
}

void Producer::QueueSave(const SaveSpec& save) {
  if (!ctx_->config.use_host_buffer() || save.token_end <= save.token_begin) return;
  pending_saves_.push_back({save.request_id, save.block_ids, save.token_begin, save.token_end});
}

void Producer::Hold(const HoldSpec& hold) {
  const std::string& id = hold.request_id;
  if (!reg_->registered() || hold.block_ids.empty()) return;
  StagePendingSaves(&id);  // normally staged in AfterForward already
  const bool stage_failed = stage_failed_from_.erase(id) != 0;
  std::optional<std::vector<uint64_t>> gens = GrantLease(id, hold.block_ids);
  if (!gens) return;
  if (stage_failed) {
    // Some of these bytes never reached the host buffer: never let a D take them.
    KVF_LOG_ERROR("connector {}: request {}: staging failed, its hold ends at once",
                  ctx_->engine_id, id);
    hold_failed_.push_back(id);
  } else if (!hold.generations.empty() && *gens != hold.generations) {
    KVF_LOG_ERROR(
        "connector {}: request {}: the scheduler promised other generations than this rank's "
        "lease table holds; the hold ends at once (D recomputes)",
        ctx_->engine_id, id);
    hold_failed_.push_back(id);
  }
  if (auto e = early_.find(id); e != early_.end()) {
    replay_at_poll_.push_back(std::move(e->second));
    early_.erase(e);
  }
  if (early_releases_.erase(id) != 0) release_at_poll_.push_back(id);
}

void Producer::NoteRelease(std::string request_id, ConnectorOutput* out) {
  if (reg_->leases().Has(request_id)) {
    EndLease(request_id, out);
  } else if (ctx_->options.external_scheduler && !ended_.contains(request_id)) {
    // Its hold is still on the way (a split P's replica rank hears D's release when the pull
    // starts, which can be before this rank's next step brings the hold).
    if (early_releases_.size() >= kMaxEarly) ForgetOld();
    if (early_releases_.size() < kMaxEarly) {
      early_releases_.insert_or_assign(std::move(request_id),
                                       Deadline::AfterMs(ctx_->config.lease_ms));
      ctx_->stats.Update([](ConnectorStats& s) { ++s.releases_before_hold; });
    }
  }
}

void Producer::RememberEarly(int32_t rank, const std::string& request_id,
                             const transfer::Notification& n) {
  if (early_.size() >= kMaxEarly) ForgetOld();
  if (early_.size() >= kMaxEarly) {
    KVF_LOG_WARN("connector {}: {} notifications wait for their holds; dropping '{}'",
                 ctx_->engine_id, early_.size(), n.message);
    return;
  }
  early_.insert_or_assign(request_id, Early{rank, n, Deadline::AfterMs(ctx_->config.lease_ms)});
  ctx_->stats.Update([](ConnectorStats& s) { ++s.notifications_before_hold; });
}

void Producer::NoteEnded(const std::string& request_id) {
  if (ended_.size() >= kMaxEarly) ForgetOld();
  if (ended_.size() >= kMaxEarly) ended_.erase(ended_.begin());  // an arbitrary old one
  ended_.insert_or_assign(request_id, Deadline::AfterMs(ctx_->config.lease_ms));
}

void Producer::ForgetOld() {
  std::erase_if(early_, [](const auto& kv) { return kv.second.forget_at.Expired(); });
  std::erase_if(ended_, [](const auto& kv) { return kv.second.Expired(); });
  std::erase_if(early_releases_, [](const auto& kv) { return kv.second.Expired(); });
}

void Producer::EndFailedHolds(ConnectorOutput* out) {
  for (const std::string& id : hold_failed_) {
    heard_.erase(id);
    if (!reg_->leases().End(id).ok()) continue;
    NoteEnded(id);
    out->finished_sending.push_back(id);
  }
  hold_failed_.clear();
}

bool Producer::TokenMatches(const std::string& presented) const {
  const std::string& want = ctx_->config.auth_token;
  if (want.empty()) return true;
  // Constant-time comparison: the token's bytes are not revealed by timing.
  unsigned char diff = want.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(want[i] ^ (i < presented.size() ? presented[i] : 0));
  }
  return diff == 0;
}

std::string Producer::HandleSideChannel(std::string_view request) {
  StatusOr<HandshakeRequest> req = DecodeHandshakeRequest(request);
  if (!req.ok()) {
    if (StatusOr<ReleaseRequest> rel = DecodeReleaseRequest(request); rel.ok()) {
      if (!TokenMatches(rel->auth_token)) return EncodeHandshakeError("bad auth token");
      MutexLock lock(&released_mu_);
      released_.push_back(std::move(rel->request_id));
      return EncodeOk({reg_->first_rank(), reg_->tp_size(), reg_->engine_tp_size()});
    }
    KVF_LOG_WARN("connector {}: rejected side-channel message: {}", ctx_->engine_id,
                 req.status().ToString());
    return EncodeHandshakeError(fmt::format("malformed request: {}", req.status().message()));
  }
  if (!TokenMatches(req->auth_token)) {
    KVF_LOG_WARN("connector {}: side-channel request with a bad auth token", ctx_->engine_id);
    return EncodeHandshakeError("bad auth token");
  }
  return reg_->handshake_reply();  // every rank's metadata, whichever D rank asks
}

}  // namespace kvferry::connector::internal
