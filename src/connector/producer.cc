// P's side of the worker: host-buffer staging (every rank's cache into its own host buffer),
// the offer of a finished request's blocks under a lease, and the lease's end — by D's
// notifications, counted per P rank, by a side-channel release, or by expiry.
#include <fmt/format.h>

#include <algorithm>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {

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
  // Same geometry both sides: each rank's host buffer mirrors its cache kernel block for kernel
  // block, addressed by the same kernel ids (the mapping of the request's logical ids).
  std::vector<kv::KernelBlockId> table = geometry_->ExpandBlockTable(s.block_ids);
  for (RankEndpoint& rank : ranks_) {
    kv::KvSourceView src = kv::SourceViewOf(*rank.cache, table);
    kv::KvDestView dst{rank.spec, rank.host_regions, table};
    KVF_RETURN_IF_ERROR(kv::RelayoutTokens(src, dst, s.token_begin, s.token_end));
  }
  const int32_t k = geometry_->block_size_kernel();
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
  out.tp_size = tp_size();
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
  if (!registered_) return;
  std::vector<std::string> released;
  {
    MutexLock lock(&released_mu_);
    released.swap(released_);
  }
  for (const std::string& id : released) EndLease(id);
  for (int32_t r = 0; r < tp_size(); ++r) {
    for (const transfer::Notification& n : ranks_[r].agent->GetNotifications()) {
      NoteNotification(r, n);
    }
  }
  for (std::string& id : leases_->EndExpired()) {
    KVF_LOG_WARN(
        "connector {}: lease of request {} expired after {} ms without every notification; "
        "freeing its blocks",
        engine_id_, id, config_.lease_ms);
    UpdateStats([](ConnectorStats& s) { ++s.leases_expired; });
    heard_.erase(id);
    pending_out_.finished_sending.push_back(std::move(id));
  }
  const int64_t held = leases_->blocks_held();
  UpdateStats([held](ConnectorStats& s) { s.blocks_held = held; });
}

void FerryConnectorImpl::NoteNotification(int32_t rank, const transfer::Notification& n) {
  StatusOr<PullNotification> parsed = DecodePullNotification(n.message);
  if (!parsed.ok() || !leases_->Has(parsed->request_id)) {
    // Late (lease already ended: expired, or released) or not ours: nothing held to free.
    KVF_LOG_WARN("connector {}: notification '{}' from {} to rank {} matches no live lease ({})",
                 engine_id_, n.message, n.peer_name, rank,
                 parsed.ok() ? "expired?" : parsed.status().ToString());
    return;
  }
  const std::string& id = parsed->request_id;
  StatusOr<kv::HeadSharding> reader =
      kv::HeadSharding::Create(sharding_.num_kv_heads(), parsed->d_tp_size);
  if (!reader.ok()) {
    KVF_LOG_WARN("connector {}: notification for {} names D tp_size {}: {}", engine_id_, id,
                 parsed->d_tp_size, reader.status().ToString());
    return;
  }
  Heard& heard = heard_[id];
  heard.per_rank.resize(ranks_.size(), 0);
  heard.d_tp_size = parsed->d_tp_size;
  ++heard.per_rank[rank];
  // Each P rank's share of the lease ends once every D rank reading from it has notified (a
  // replica no D rank reads from has nothing to wait for); the lease ends with the last share.
  for (int32_t p = 0; p < tp_size(); ++p) {
    if (heard.per_rank[p] < kv::CountReaders(sharding_, *reader, p).value()) return;
  }
  EndLease(id);
}

void FerryConnectorImpl::EndLease(const std::string& request_id) {
  heard_.erase(request_id);
  if (!leases_->End(request_id).ok()) return;  // already ended (expired, or released twice)
  pending_out_.finished_sending.push_back(request_id);
  UpdateStats([](ConnectorStats& s) { ++s.leases_released_by_notification; });
}

}  // namespace kvferry::connector::internal
