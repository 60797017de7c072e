#include "engine/scheduler.h"

#include <algorithm>

#include "kvferry/common/check.h"
#include "kvferry/common/logging.h"

namespace kvferry::engine {

Scheduler::Scheduler(const SchedulerOptions& options, kv::BlockPool pool,
                     kv::BlockGeometry geometry, connector::ConnectorScheduler* connector,
                     KvTier* tier)
    : options_(options),
      pool_(std::move(pool)),
      geometry_(geometry),
      connector_(connector),
      tier_(tier) {}

void Scheduler::Add(std::unique_ptr<Request> request) {
  Request* r = request.get();
  requests_.emplace(r->request_id, std::move(request));
  waiting_.push_back(r);
  if (r->first_output) Resume(r);
}

void Scheduler::Resume(Request* r) {
  const connector::FirstToken& first = *r->first_output;
  r->tokens.push_back(first.token_id);
  RequestOutput& out = OutputFor(*r);
  out.new_token_ids.push_back(first.token_id);
  out.new_logprobs.push_back(first.logprob);
  if (r->params.top_logprobs > 0) {
    std::vector<TokenLogprob> top;
    for (const connector::FirstTokenAlternative& a : first.top_logprobs) {
      top.push_back({a.token_id, a.logprob});
    }
    out.top_logprobs.push_back(std::move(top));
  }
  FinishIfDone(r, first.token_id);
}

bool Scheduler::Contains(std::string_view request_id) const {
  const std::string id(request_id);
  return requests_.count(id) > 0 || held_.count(id) > 0;
}

bool Scheduler::HasComputableWork() const {
  if (!running_.empty()) return true;
  for (const Request* r : waiting_) {
    if (r->state == RequestState::kWaiting) return true;
  }
  return false;
}

RequestOutput& Scheduler::OutputFor(const Request& r) {
  auto it = output_index_.find(r.request_id);
  if (it != output_index_.end()) return outputs_[it->second];
  output_index_.emplace(r.request_id, outputs_.size());
  RequestOutput& out = outputs_.emplace_back();
  out.request_id = r.request_id;
  out.num_prompt_tokens = r.num_prompt_tokens;
  return out;
}

std::vector<RequestOutput> Scheduler::TakeOutputs() {
  std::vector<RequestOutput> out = std::move(outputs_);
  outputs_.clear();
  output_index_.clear();
  return out;
}

int32_t Scheduler::BlocksNeeded(const Request& r, int32_t num_tokens) const {
  return std::max(0, geometry_.LogicalBlocksFor(num_tokens) - r.table.num_blocks_logical());
}

bool Scheduler::AllocateInto(Request* r, int32_t n) {
  if (n == 0) return true;
  auto blocks = pool_.Allocate(n);
  if (!blocks.ok()) return false;
  r->table.Append(*blocks);
  return true;
}

void Scheduler::RemoveFromQueues(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
}

void Scheduler::Preempt(Request* r) {
  RemoveFromQueues(r);
  KVF_CHECK_OK(pool_.Free(r->table.logical_ids()));
  r->table.Clear();
  r->num_computed_tokens = 0;
  r->num_blocks_registered = 0;
  r->state = RequestState::kWaiting;
  waiting_.push_front(r);
  ++num_preemptions_;
}

void Scheduler::RegisterFullBlocks(Request* r) {
  if (!options_.enable_prefix_caching) return;
  const int32_t full = r->num_computed_tokens / geometry_.block_size_logical();
  if (full <= r->num_blocks_registered) return;
  const Status s = pool_.CacheFullBlocks(r->table.logical_ids(), r->tokens, full);
  if (!s.ok()) KVF_LOG_WARN("prefix cache: {}", s.ToString());
  if (tier_ != nullptr) OffloadBlocks(r, r->num_blocks_registered, full);
  r->num_blocks_registered = full;
}

const std::vector<kv::BlockHash>& Scheduler::BlockHashes(Request* r, int32_t n) const {
  std::vector<kv::BlockHash>& h = r->block_hashes;
  const int32_t have = static_cast<int32_t>(h.size());
  if (n > have) {
    const int32_t B = geometry_.block_size_logical();
    const std::vector<kv::BlockHash> more =
        kv::ChainHashes(pool_.hash_salt(), have == 0 ? 0 : h.back(), B,
                        std::span<const int32_t>(r->tokens).subspan(
                            static_cast<size_t>(have) * B, static_cast<size_t>(n - have) * B));
    h.insert(h.end(), more.begin(), more.end());
  }
  return h;
}

void Scheduler::OffloadBlocks(Request* r, int32_t from, int32_t to) {
  const std::vector<kv::BlockHash>& h = BlockHashes(r, to);
  const size_t B = static_cast<size_t>(geometry_.block_size_logical());
  for (int32_t b = from; b < to; ++b) {
    if (tier_->Contains(h[b])) continue;
    const std::optional<kv::BlockHash> parent =
        b == 0 ? std::nullopt : std::optional<kv::BlockHash>(h[b - 1]);
    tier_->Store(h[b], parent, std::span<const int32_t>(r->tokens).first((b + 1) * B),
                 r->table.logical_ids()[b]);
  }
}

void Scheduler::ExtendFromDisk(Request* r, std::vector<kv::LogicalBlockId>* hits) {
  const int32_t B = geometry_.block_size_logical();
  const int32_t max_hits = (r->num_tokens() - 1) / B;
  std::vector<kv::LogicalBlockId>& ids = *hits;
  const int32_t have = static_cast<int32_t>(ids.size());
  if (have >= max_hits) return;
  const std::vector<kv::BlockHash>& h = BlockHashes(r, max_hits);
  int32_t on_disk = 0;
  while (have + on_disk < max_hits && tier_->Contains(h[have + on_disk])) ++on_disk;
  if (on_disk == 0) return;
  KVF_CHECK_OK(pool_.Touch(ids));  // the RAM hits must survive the allocation below
  int32_t loaded = 0;
  if (pool_.Stats().free >= geometry_.LogicalBlocksFor(r->num_tokens()) - have) {
    const std::vector<kv::LogicalBlockId> fresh = *pool_.Allocate(on_disk);
    loaded = LoadFromDisk(r, have, fresh);
    ids.insert(ids.end(), fresh.begin(), fresh.end());
    const Status s = pool_.CacheFullBlocks(ids, r->tokens, have + loaded);
    if (!s.ok()) {
      KVF_LOG_WARN("prefix cache (from disk): {}", s.ToString());
      loaded = 0;
    }
    num_disk_hit_tokens_ += static_cast<int64_t>(loaded) * B;
  }
  KVF_CHECK_OK(pool_.Free(ids));  // all back, the loaded ones cached like the RAM hits
  ids.resize(static_cast<size_t>(have + loaded));
}

int32_t Scheduler::LoadFromDisk(Request* r, int32_t have,
                                std::span<const kv::LogicalBlockId> fresh) {
  const std::vector<kv::BlockHash>& h = r->block_hashes;
  const size_t B = static_cast<size_t>(geometry_.block_size_logical());
  int32_t loaded = 0;
  for (kv::LogicalBlockId id : fresh) {
    const int32_t b = have + loaded;
    if (!tier_->Load(h[b], std::span<const int32_t>(r->tokens).first((b + 1) * B), id)) break;
    ++loaded;
  }
  return loaded;
}

bool Scheduler::Admit(Request* r, int32_t budget, ScheduledChunk* chunk) {
  const int32_t B = geometry_.block_size_logical();
  if (r->table.num_blocks_logical() == 0) {
    // Fresh (or preempted): local prefix hits, never covering the last token.
    std::vector<kv::LogicalBlockId> hits = LocalPrefixHits(r);
    const int32_t local = static_cast<int32_t>(hits.size()) * B;
    connector::MatchResult match;
    const bool consult = connector_ != nullptr && !r->connector_consulted;
    if (consult) match = connector_->GetNumNewMatchedTokens(r->View(), local);
    const int32_t ext = std::max(0, match.num_external_tokens);
    int32_t hits_free = 0;
    for (kv::LogicalBlockId id : hits) hits_free += pool_.RefCount(id) == 0 ? 1 : 0;
    const int32_t after_load = local + ext;
    int32_t num_new = 0;
    int32_t target = after_load;
    if (!(ext > 0 && match.load_async)) {
      num_new = std::min(r->num_tokens() - after_load, budget);
      target = after_load + num_new;
    }
    const int32_t need = geometry_.LogicalBlocksFor(target) - static_cast<int32_t>(hits.size());
    if (pool_.Stats().free - hits_free < need) return false;
    if (!hits.empty()) {
      KVF_CHECK_OK(pool_.Touch(hits));
      r->table.Append(hits);
    }
    KVF_CHECK(AllocateInto(r, need));
    r->num_computed_tokens = local;
    r->num_blocks_registered = static_cast<int32_t>(hits.size());
    r->num_cached_tokens = std::max(r->num_cached_tokens, local);
    num_prefix_cache_hit_tokens_ += local;
    if (consult) RecordConnectorMatch(r, match, local, ext);
    if (ext > 0 && match.load_async) {
      r->state = RequestState::kWaitingForRemoteKv;
      r->pending_external_tokens = ext;
      return true;
    }
    // A synchronous load: the worker fills these tokens before the forward pass.
    r->num_computed_tokens = after_load;
    r->num_cached_tokens = std::max(r->num_cached_tokens, after_load);
    if (num_new <= 0) return true;
    *chunk = {r, after_load, num_new, after_load + num_new == r->num_tokens()};
    return true;
  }
  return AdmitAfterRemoteLoad(r, budget, chunk);
}

std::vector<kv::LogicalBlockId> Scheduler::LocalPrefixHits(Request* r) {
  std::vector<kv::LogicalBlockId> hits;
  if (options_.enable_prefix_caching) {
    hits = pool_.FindCachedPrefix(r->tokens);
    const size_t max_hits =
        static_cast<size_t>((r->num_tokens() - 1) / geometry_.block_size_logical());
    if (hits.size() > max_hits) hits.resize(max_hits);
    if (tier_ != nullptr) ExtendFromDisk(r, &hits);
  }
  return hits;
}

void Scheduler::RecordConnectorMatch(Request* r, const connector::MatchResult& match, int32_t local,
                                     int32_t ext) {
  r->connector_consulted = true;
  if (match.no_load_outcome) {
    connector::LoadReport& report = r->kv_load.emplace();
    report.request_id = r->request_id;
    report.outcome = *match.no_load_outcome;
    report.local_hit_tokens = local;
  }
  connector_->UpdateStateAfterAlloc(r->View(), r->table.logical_ids(), ext);
}

bool Scheduler::AdmitAfterRemoteLoad(Request* r, int32_t budget, ScheduledChunk* chunk) {
  // Back from a remote load: blocks are there.
  const int32_t num_new = std::min(r->num_tokens() - r->num_computed_tokens, budget);
  if (num_new <= 0) return true;
  const int32_t need = BlocksNeeded(*r, r->num_computed_tokens + num_new);
  if (pool_.Stats().free < need) return false;
  KVF_CHECK(AllocateInto(r, need));
  *chunk = {r, r->num_computed_tokens, num_new,
            r->num_computed_tokens + num_new == r->num_tokens()};
  return true;
}

std::vector<ScheduledChunk> Scheduler::Schedule() {
  std::vector<ScheduledChunk> chunks;
  int32_t budget = options_.max_num_batched_tokens;
  bool preempted = false;
  const int32_t total_blocks = pool_.num_blocks_logical();

  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int32_t num_new = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    if (num_new <= 0) {
      ++i;
      continue;
    }
    const int32_t target = r->num_computed_tokens + num_new;
    if (geometry_.LogicalBlocksFor(target) > total_blocks) {
      // Can never fit, even alone: stop it rather than preempt forever.
      Finish(r, FinishReason::kLength);
      continue;
    }
    bool self_preempted = false;
    while (pool_.Stats().free < BlocksNeeded(*r, target)) {
      Request* victim = running_.back();
      Preempt(victim);
      preempted = true;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    KVF_CHECK(AllocateInto(r, BlocksNeeded(*r, target)));
    chunks.push_back({r, r->num_computed_tokens, num_new, target == r->num_tokens()});
    budget -= num_new;
    ++i;
  }

  if (!preempted) {
    for (size_t i = 0; i < waiting_.size() && budget > 0;) {
      if (static_cast<int32_t>(running_.size()) >= options_.max_num_seqs) break;
      Request* r = waiting_[i];
      if (r->state == RequestState::kWaitingForRemoteKv) {
        ++i;
        continue;
      }
      ScheduledChunk chunk;
      if (!Admit(r, budget, &chunk)) break;  // out of blocks: keep arrival order
      if (r->state == RequestState::kWaitingForRemoteKv) {
        ++i;
        continue;
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      r->state = RequestState::kRunning;
      running_.push_back(r);
      if (chunk.request != nullptr) {
        chunks.push_back(chunk);
        budget -= chunk.num_tokens;
      }
    }
  }
  return chunks;
}

void Scheduler::OnChunksComputed(std::span<const ScheduledChunk> chunks) {
  for (const ScheduledChunk& c : chunks) {
    Request* r = c.request;
    r->num_computed_tokens = c.first_pos + c.num_tokens;
    const int32_t prompt_part =
        std::max(0, std::min(r->num_prompt_tokens, c.first_pos + c.num_tokens) - c.first_pos);
    num_prompt_tokens_computed_ += prompt_part;
    RegisterFullBlocks(r);
    if (connector_ != nullptr) {
      connector_->OnTokensComputed(r->View(), r->table.logical_ids(), c.first_pos,
                                   c.first_pos + c.num_tokens);
    }
  }
}

void Scheduler::AppendToken(Request* r, int32_t token, float logprob,
                            std::vector<TokenLogprob> top_logprobs) {
  r->tokens.push_back(token);
  ++num_generated_tokens_;
  RequestOutput& out = OutputFor(*r);
  out.new_token_ids.push_back(token);
  out.new_logprobs.push_back(logprob);
  if (r->num_output_tokens() == 1) {
    std::vector<connector::FirstTokenAlternative> alts;
    for (const TokenLogprob& t : top_logprobs) alts.push_back({t.token_id, t.logprob});
    r->first_output = connector::FirstToken{token, logprob, std::move(alts), r->seed};
  }
  if (r->params.top_logprobs > 0) out.top_logprobs.push_back(std::move(top_logprobs));
  FinishIfDone(r, token);
}

void Scheduler::FinishIfDone(Request* r, int32_t token) {
  const SamplingParams& p = r->params;
  const bool eos = !p.ignore_eos &&
                   std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(), token) !=
                       options_.eos_token_ids.end();
  const bool stop_token =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  const bool at_max_len = r->num_tokens() >= options_.max_model_len;
  r->generation_ended = eos || stop_token || at_max_len;
  if (eos || stop_token) {
    Finish(r, FinishReason::kStop);
  } else if (r->num_output_tokens() >= p.max_tokens || at_max_len) {
    Finish(r, FinishReason::kLength);
  }
}

void Scheduler::Finish(Request* r, FinishReason reason, Status error) {
  RequestOutput& out = OutputFor(*r);
  out.finished = true;
  out.finish_reason = reason;
  out.error = std::move(error);
  out.num_cached_tokens = r->num_cached_tokens;
  out.kv_load = r->kv_load;
  if (r->state == RequestState::kWaitingForRemoteKv) {
    // A load is writing into its blocks: keep them until the connector reports the load done.
    r->aborted = true;
    return;
  }
  ReleaseBlocks(r);
}

void Scheduler::ReleaseBlocks(Request* r) {
  RemoveFromQueues(r);
  const std::vector<kv::LogicalBlockId> ids(r->table.logical_ids().begin(),
                                            r->table.logical_ids().end());
  if (connector_ != nullptr) {
    connector::FinishResult fr = connector_->RequestFinished(r->View(), ids);
    if (!fr.error.ok() && !r->aborted) {
      RequestOutput& out = OutputFor(*r);
      out.finish_reason = FinishReason::kError;
      out.error = fr.error;
    }
    if (fr.kv_transfer_params && !r->aborted) {
      auto it = output_index_.find(r->request_id);
      if (it != output_index_.end())
        outputs_[it->second].kv_transfer_params = fr.kv_transfer_params;
    }
    if (fr.delay_free_blocks && !ids.empty()) {
      if (early_finished_sending_.erase(r->request_id) == 0) {
        KVF_CHECK_OK(pool_.Hold(ids));
        held_[r->request_id] = ids;
      }
    }
  }
  KVF_CHECK_OK(pool_.Free(ids));
  requests_.erase(r->request_id);  // r is gone
}

Status Scheduler::Abort(std::string_view request_id) {
  auto it = requests_.find(std::string(request_id));
  if (it == requests_.end() || it->second->aborted) {
    return NotFoundError("no live request '" + std::string(request_id) + "'");
  }
  Finish(it->second.get(), FinishReason::kAbort);
  return Status::Ok();
}

void Scheduler::UpdateFromConnector(const connector::ConnectorOutput& output) {
  for (kv::LogicalBlockId id : output.invalid_block_ids) pending_invalid_.insert(id.value());
  for (const connector::LoadReport& report : output.load_reports) {
    auto it = requests_.find(report.request_id);
    if (it != requests_.end()) it->second->kv_load = report;
  }
  const int32_t B = geometry_.block_size_logical();
  for (const std::string& id : output.finished_recving) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->state != RequestState::kWaitingForRemoteKv) {
      KVF_LOG_WARN("connector reported finished_recving for unknown request '{}'", id);
      continue;
    }
    Request* r = it->second.get();
    const int32_t loaded = r->num_computed_tokens + r->pending_external_tokens;
    r->pending_external_tokens = 0;
    r->state = RequestState::kWaiting;
    // First invalid block of the request, if any (consumes the reports of its blocks).
    int32_t first_invalid = -1;
    std::vector<kv::LogicalBlockId> invalid;
    const auto ids = r->table.logical_ids();
    for (int32_t b = 0; b < static_cast<int32_t>(ids.size()); ++b) {
      if (pending_invalid_.erase(ids[b].value()) > 0) {
        invalid.push_back(ids[b]);
        if (first_invalid < 0) first_invalid = b;
      }
    }
    if (r->aborted) {
      ReleaseBlocks(r);
      continue;
    }
    if (first_invalid >= 0) {
      // The ids are this request's own blocks: a bad one is a scheduler bug, not bad input.
      KVF_CHECK_OK(pool_.InvalidateCached(invalid));
      if (options_.kv_load_failure_policy == connector::KvLoadFailurePolicy::kFail) {
        Finish(r, FinishReason::kError,
               DataLossError("remote KV load failed for " + std::to_string(invalid.size()) +
                             " block(s) of request '" + id + "'"));
        continue;
      }
      r->num_computed_tokens = std::min(loaded, first_invalid * B);
      r->num_blocks_registered = std::min(r->num_blocks_registered, first_invalid);
    } else {
      r->num_computed_tokens = loaded;
    }
    if (r->num_computed_tokens >= r->num_tokens()) r->num_computed_tokens = r->num_tokens() - 1;
    r->num_cached_tokens = std::max(r->num_cached_tokens, r->num_computed_tokens);
    RegisterFullBlocks(r);
  }
  for (const std::string& id : output.finished_sending) {
    auto it = held_.find(id);
    if (it == held_.end()) {
      if (requests_.count(id) > 0) early_finished_sending_.insert(id);
      continue;
    }
    KVF_CHECK_OK(pool_.Release(it->second));
    held_.erase(it);
  }
}

EngineStats Scheduler::Stats() const {
  const kv::BlockPoolStats ps = pool_.Stats();
  EngineStats s;
  s.num_blocks_total = ps.total;
  s.num_blocks_free = ps.free - ps.cached;
  s.num_blocks_cached = ps.cached;
  s.num_blocks_held = ps.held;
  s.num_blocks_used = ps.in_use - ps.held;
  s.num_running = static_cast<int32_t>(running_.size());
  const auto pending = [](const Request* r) {
    return static_cast<int64_t>(std::max(0, r->num_prompt_tokens - r->num_computed_tokens));
  };
  for (const Request* r : running_) s.num_pending_prefill_tokens += pending(r);
  for (const Request* r : waiting_) {
    if (r->state == RequestState::kWaitingForRemoteKv) {
      ++s.num_waiting_for_remote_kv;
    } else {
      ++s.num_waiting;
      s.num_pending_prefill_tokens += pending(r);
    }
  }
  s.num_preemptions = num_preemptions_;
  s.num_prompt_tokens_computed = num_prompt_tokens_computed_;
  s.num_prefix_cache_hit_tokens = num_prefix_cache_hit_tokens_;
  s.num_disk_hit_tokens = num_disk_hit_tokens_;
  s.num_generated_tokens = num_generated_tokens_;
  return s;
}

}  // namespace kvferry::engine
