// Scheduler (internal): continuous batching over the block pool (docs/engine.md "Scheduler").
//
// Each step, under a token budget (max_num_batched_tokens):
//   1. running requests first, in arrival order: a decode takes 1 token, a prompt in progress
//      takes the rest of its prompt or what the budget leaves (chunked prefill). When the pool
//      has too few free blocks, the most recently admitted running request is preempted (blocks
//      freed, num_computed_tokens = 0, back to the head of the queue: recompute).
//   2. then waiting requests, in order, while budget, seats (max_num_seqs) and blocks last
//      (none are admitted in a step that preempted). A new request looks up its prompt in the
//      prefix cache (full blocks only, and never the whole prompt: the last prompt token is
//      always computed, for its logits), then asks the connector for remote tokens. With
//      load_async it gets blocks for the whole prompt and parks in kWaitingForRemoteKv, which
//      does not block the requests behind it.
// After the forward pass the scheduler advances num_computed_tokens, registers newly full
// blocks in the prefix cache and tells the connector which tokens were computed.
//
// Connector output: finished_recving puts a request back to kWaiting with num_computed_tokens
// = loaded tokens (minus 1 when that is the whole prompt: the last token is recomputed for its
// logits). Blocks in invalid_block_ids roll the request back to its last valid block and drop
// those blocks' cache entries (policy recompute), or finish it with an error (policy fail).
// Finished requests whose connector asked to delay the free keep their blocks held until
// finished_sending names them.
//
// Disk tier (docs/kv_offload.md; a KvTier given): every block RegisterFullBlocks offers the
// prefix cache is also written to disk unless it is there. A fresh request whose prompt goes on
// past its RAM hits with blocks the disk holds has them read into fresh blocks and registered in
// the prefix cache as it looks up its hits (ExtendFromDisk) — only when the pool could then hold
// the whole request, so a request that must wait does not read blocks the wait would evict — after
// which it is admitted like any request with local hits. A block the disk cannot give back
// (damaged, gone) ends the run there: the rest is computed.
//
// Accounting: every block reference a request takes (Touch / Allocate) is released exactly once
// (Free, or Hold + Free then Release), so when all requests are done and nothing is held the
// pool is back to its starting state.
//
// Thread-safety: engine thread only.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/kv_tier.h"
#include "engine/request.h"
#include "kvferry/engine/request_output.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_pool.h"

namespace kvferry::engine {

struct SchedulerOptions {
  int32_t max_num_batched_tokens = 256;
  int32_t max_num_seqs = 64;
  int32_t max_model_len = 0;
  bool enable_prefix_caching = true;
  connector::KvLoadFailurePolicy kv_load_failure_policy =
      connector::KvLoadFailurePolicy::kRecompute;
  std::vector<int32_t> eos_token_ids;  // any of them stops a request (unless ignore_eos)
};

// One request's share of a step: tokens [first_pos, first_pos + num_tokens).
struct ScheduledChunk {
  Request* request = nullptr;
  int32_t first_pos = 0;
  int32_t num_tokens = 0;
  bool completes = false;  // after this chunk every known token is computed: sample
};

class Scheduler {
 public:
  // `tier`: the disk tier, or null. Not owned; outlives the scheduler.
  Scheduler(const SchedulerOptions& options, kv::BlockPool pool, kv::BlockGeometry geometry,
            connector::ConnectorScheduler* connector, KvTier* tier = nullptr);

  // Takes a validated request (id unique). One that carries P's first output token
  // (Request::first_output, set by the engine on D) starts with it as already generated: it is
  // reported in the next outputs, stop conditions apply to it, and sampling continues at output
  // index 1.
  void Add(std::unique_ptr<Request> request);
  bool Contains(std::string_view request_id) const;
  // NotFound when unknown. Reports finish (kAbort) in the next outputs.
  Status Abort(std::string_view request_id);

  std::vector<ScheduledChunk> Schedule();
  // After the forward pass of `chunks`.
  void OnChunksComputed(std::span<const ScheduledChunk> chunks);
  // A sampled token for a request whose chunk completed; finishes it on stop / length.
  void AppendToken(Request* request, int32_t token, float logprob,
                   std::vector<TokenLogprob> top_logprobs);
  void UpdateFromConnector(const connector::ConnectorOutput& output);

  // Outputs gathered since the last call, in the order requests first appeared.
  std::vector<RequestOutput> TakeOutputs();

  // Also true while outputs wait to be taken (e.g. an abort reported by the next Step()).
  bool HasWork() const { return !requests_.empty() || !held_.empty() || !outputs_.empty(); }
  bool HasComputableWork() const;
  EngineStats Stats() const;
  std::vector<kv::BlockEvent> TakeKvEvents() { return pool_.TakeEvents(); }
  const kv::BlockPool& pool() const { return pool_; }
  const kv::BlockGeometry& geometry() const { return geometry_; }

 private:
  RequestOutput& OutputFor(const Request& r);
  void Resume(Request* r);  // appends r->first_output as generated (Add)
  // After `token` was appended: finishes on eos, a stop token, max_tokens or max_model_len.
  void FinishIfDone(Request* r, int32_t token);
  void Finish(Request* r, FinishReason reason, Status error = Status::Ok());
  void ReleaseBlocks(Request* r);  // connector RequestFinished, hold or free, erase
  void Preempt(Request* r);
  // Blocks `r` still needs to hold `num_tokens` tokens.
  int32_t BlocksNeeded(const Request& r, int32_t num_tokens) const;
  bool AllocateInto(Request* r, int32_t n);
  void RegisterFullBlocks(Request* r);
  // Disk tier: r's chain hashes of its first `n` full blocks (computed once, kept on r); blocks
  // [from, to) of r written to disk where missing; r's disk hits read into the prefix cache.
  const std::vector<kv::BlockHash>& BlockHashes(Request* r, int32_t n) const;
  void OffloadBlocks(Request* r, int32_t from, int32_t to);
  // Past `hits` (r's RAM hits): the blocks the disk holds, read into fresh blocks and
  // registered in the prefix cache, appended to `hits` (which stay free and cached, as RAM hits
  // are until Admit touches them).
  void ExtendFromDisk(Request* r, std::vector<kv::LogicalBlockId>* hits);
  // Reads blocks [have, have + n) of r from disk into `fresh`; how many leading ones it read.
  int32_t LoadFromDisk(Request* r, int32_t have, std::span<const kv::LogicalBlockId> fresh);
  // Tries to admit waiting request `r`; false when it must wait (no blocks). Sets *chunk when
  // it computes this step.
  bool Admit(Request* r, int32_t budget, ScheduledChunk* chunk);
  // Admit's steps. A fresh request's local prefix hits (prefix caching on; RAM, then disk),
  // never covering its last token; a consulted connector's match recorded on `r` (the no-load
  // outcome) and told of the blocks; a request whose remote load finished admitted like a running
  // one.
  std::vector<kv::LogicalBlockId> LocalPrefixHits(Request* r);
  void RecordConnectorMatch(Request* r, const connector::MatchResult& match, int32_t local,
                            int32_t ext);
  bool AdmitAfterRemoteLoad(Request* r, int32_t budget, ScheduledChunk* chunk);
  void RemoveFromQueues(Request* r);

  SchedulerOptions options_;
  kv::BlockPool pool_;
  kv::BlockGeometry geometry_;
  connector::ConnectorScheduler* connector_;
  KvTier* tier_;

  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  std::unordered_map<std::string, std::vector<kv::LogicalBlockId>> held_;
  std::unordered_set<std::string> early_finished_sending_;
  std::unordered_set<int32_t> pending_invalid_;  // logical ids reported invalid, not yet consumed

  std::vector<RequestOutput> outputs_;
  std::unordered_map<std::string, size_t> output_index_;

  int64_t num_preemptions_ = 0;
  int64_t num_prompt_tokens_computed_ = 0;
  int64_t num_prefix_cache_hit_tokens_ = 0;
  int64_t num_disk_hit_tokens_ = 0;
  int64_t num_generated_tokens_ = 0;
};

}  // namespace kvferry::engine
