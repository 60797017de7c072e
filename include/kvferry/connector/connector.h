// The KV connector contract between the engine and a KV transfer implementation, after vLLM's
// KVConnectorBase_V1 (docs/connector.md §1). Two halves that talk only through the
// per-step ConnectorMetadata and the worker's ConnectorOutput:
//
//   ConnectorScheduler  lives in the scheduler: decides what to load and what to hold.
//   ConnectorWorker     lives beside the model runner: registers the cache, moves bytes.
//
// Id spaces: everything here is LOGICAL (kv::LogicalBlockId, in this engine's
// block_size_logical) — block lists, remote block ids, failure reports. Kernel ids appear only
// inside the worker half, where it turns logical ids into descriptors with kv::BlockGeometry.
//
// Per engine step, in this order (all on the engine thread):
//   scheduler: GetNumNewMatchedTokens / UpdateStateAfterAlloc for newly scheduled requests,
//              RequestFinished for finished ones, then BuildConnectorMeta()
//   worker:    BindMetadata(meta), StartLoadKv()   (non-blocking)
//              ... forward pass ...
//              AfterForward()                      (host-buffer staging of computed chunks)
//              GetFinished()                       -> ConnectorOutput
//   scheduler: UpdateConnectorOutput(output)
//
// Thread-safety: both halves are called from the engine thread only; implementations may run
// their own background threads (handshakes, progress) and must synchronise internally.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/head_sharding.h"

namespace kvferry::connector {

// What the scheduler does with a request whose remote KV could not be loaded (the connector
// reported invalid blocks), and what P does when it cannot deliver a request's KV. One type for
// the connector's config and the engine's scheduler.
enum class KvLoadFailurePolicy : uint8_t {
  kRecompute,  // D rolls back to the last valid prefix and computes the rest locally
  kFail,       // the request finishes with an error
};

// What the connector may see of a request. Filled by the engine.
struct RequestView {
  std::string request_id;
  std::span<const int32_t> prompt_tokens;
  int32_t num_tokens = 0;                                // prompt + generated so far
  const KvTransferParams* kv_transfer_params = nullptr;  // null when the request carried none
  int32_t num_computed_tokens = 0;  // tokens whose KV is in the cache (at admission: the hit)
  // At RequestFinished: the request ended by itself (eos or a stop token, or max_model_len) —
  // no decoder will resume it, so a P holds nothing for one.
  bool generation_ended = false;
  // The first output token once sampled (null before). At RequestFinished of a P request that
  // generated exactly that one token, the connector puts it into the kv_transfer_params it
  // returns, so that D resumes after it (the hand-off record has one author: the connector).
  const FirstToken* first_token = nullptr;
};

// D: how a request's remote KV arrived. A load reports it with finished_recving (a failed load
// says how it failed); a request that needs no load gets it from GetNumNewMatchedTokens
// (MatchResult::no_load_outcome). The engine returns it in the request's final output, so a test
// or an operator can tell a pull from a recompute (both give the same tokens).
enum class LoadOutcome : uint8_t {
  kPulled,            // the external tokens' KV was read from P
  kNotifyOnly,        // D's own cache held every block it needed: P was only told to free
  kFailedHandshake,   // no metadata from P: recomputed (or failed, per policy)
  kFailedTransfer,    // the read failed
  kFailedDeadline,    // the read ran past transfer_timeout_ms
  kFailedGeneration,  // P reused a block before the read ended (its lease ran out)
  kNoneOffered,       // P offered no KV (it could not stage any): D computed the prompt itself
};
std::string_view LoadOutcomeName(LoadOutcome outcome);  // "pulled" | "notify_only" | ...

// Answer of GetNumNewMatchedTokens.
struct MatchResult {
  int32_t num_external_tokens = 0;  // tokens beyond the local prefix hit that come from remote KV
  bool load_async = false;          // true: park the request in WAITING_FOR_REMOTE_KV
  // The request carries remote KV but needs none of it (D's own cache holds every token it
  // does not compute itself, or P offered none): no load; the engine reports the outcome.
  std::optional<LoadOutcome> no_load_outcome;
};

// Answer of RequestFinished.
struct FinishResult {
  bool delay_free_blocks = false;  // true: keep the blocks until GetFinished reports the id
  std::optional<KvTransferParams> kv_transfer_params;  // returned to the client (P -> proxy)
  // Not OK: the request fails with this error instead (P could not deliver its KV and the
  // policy is `fail`); no kv_transfer_params go out and no blocks are held.
  Status error;
};

// One remote load: fill `local_block_ids` (D's logical ids, the tail D's prefix cache lacks)
// from `remote.remote_block_ids` (P's logical ids). `num_local_computed_tokens` tokens are
// already in D's cache; `num_external_tokens` come from P.
struct LoadSpec {
  std::string request_id;
  KvTransferParams remote;
  std::vector<kv::LogicalBlockId> local_block_ids;  // all of the request's blocks on D
  int32_t num_local_computed_tokens = 0;
  int32_t num_external_tokens = 0;
};

// Host-buffer staging on P: after this step's forward pass, copy the kernel blocks covering
// tokens [token_begin, token_end) of the request into the registered host buffer.
// (FerryConnector's own scheduler half stages from OnTokensComputed directly — in AfterForward,
// or at the latest in RequestFinished before the lease is granted — and leaves
// ConnectorMetadata::saves empty; a scheduler outside it, vLLM's, ships them here, and the
// worker stages them in AfterForward.)
struct SaveSpec {
  std::string request_id;
  std::vector<kv::LogicalBlockId> block_ids;  // all of the request's blocks on P
  int32_t token_begin = 0;
  int32_t token_end = 0;
};

// P, when the scheduler is not this connector's (vLLM's, python/kvferry/vllm): lease a finished
// request's blocks now. `generations` are the ones that scheduler promised D in the
// kv_transfer_params (its mirror of this lease table, granted first): the worker's grant must
// give the same, else it ends the lease at once, so that D's generation check fails and D
// recomputes instead of trusting blocks whose generation it cannot vouch for.
struct HoldSpec {
  std::string request_id;
  std::vector<kv::LogicalBlockId> block_ids;
  std::vector<uint64_t> generations;  // one per block_ids entry, or empty: not checked
};

struct ConnectorMetadata {
  std::vector<LoadSpec> loads;
  std::vector<SaveSpec> saves;
  std::vector<std::string> requests_to_hold;  // P: finished requests whose blocks are now leased
  // Filled only by a scheduler outside this connector (vLLM's); FerryConnector's own scheduler
  // half grants leases at RequestFinished and sends releases itself.
  std::vector<HoldSpec> holds;  // P: lease these blocks now (see HoldSpec)
  // D: P's offers this engine needs nothing of (its own prefix cache held every token): tell P
  // to end the lease now, over the side channel, rather than at lease end (on every P rank; of
  // a split D engine, only the connector holding its rank 0 sends them).
  std::vector<KvTransferParams> releases;
};

// D: what one tensor-parallel rank of D read for a request.
struct RankLoad {
  int32_t rank = 0;
  std::vector<int32_t> source_ranks;  // the P ranks it read its heads from, in head order
  uint64_t bytes = 0;
  uint64_t descriptors = 0;
};

// D: what one request's remote KV amounted to (see LoadOutcome).
struct LoadReport {
  std::string request_id;
  LoadOutcome outcome = LoadOutcome::kPulled;
  int32_t local_hit_tokens = 0;  // prompt tokens D's own prefix cache held
  int32_t tokens = 0;            // prompt tokens whose KV was read from P (0 unless kPulled)
  uint64_t bytes = 0;            // bytes read, all ranks (0 unless kPulled)
  uint64_t descriptors = 0;      // descriptors posted for the data reads, all ranks
  // Of `bytes`, those read by one memcpy from P's memory mapped into D (same host, P's cache or
  // host buffer allocated by its transfer agent); the rest went through the transport.
  uint64_t bytes_by_memcpy = 0;
  double pull_ms = 0.0;         // from the first read's post to the load's end (when kPulled)
  bool staged = false;          // read into staging and re-laid out (P's geometry differs)
  std::string error;            // why the load failed (empty when kPulled)
  std::vector<RankLoad> ranks;  // per D rank (when kPulled)
};

struct ConnectorOutput {
  std::vector<std::string> finished_sending;  // P: blocks may be freed now (read, or lease out)
  std::vector<std::string> finished_recving;  // D: load finished (successfully or not)
  std::vector<kv::LogicalBlockId> invalid_block_ids;  // D: local logical blocks that failed
  std::vector<LoadReport> load_reports;               // D: one per finished_recving entry
};

class ConnectorScheduler {
 public:
  virtual ~ConnectorScheduler() = default;

  // Side-effect free; may be called several times for a request.
  virtual MatchResult GetNumNewMatchedTokens(const RequestView& request,
                                             int32_t num_local_computed_tokens) = 0;
  // After the pool allocated the request's blocks (all of them, logical ids, in order).
  virtual void UpdateStateAfterAlloc(const RequestView& request,
                                     std::span<const kv::LogicalBlockId> block_ids,
                                     int32_t num_external_tokens) = 0;
  // After a forward pass computed tokens [token_begin, token_end) of a request (for staging).
  virtual void OnTokensComputed(const RequestView& request,
                                std::span<const kv::LogicalBlockId> block_ids, int32_t token_begin,
                                int32_t token_end) = 0;
  // Exactly once per request, before its blocks are freed.
  virtual FinishResult RequestFinished(const RequestView& request,
                                       std::span<const kv::LogicalBlockId> block_ids) = 0;
  // Once per step; resets the pending state it drained.
  virtual ConnectorMetadata BuildConnectorMeta() = 0;
  virtual void UpdateConnectorOutput(const ConnectorOutput& output) = 0;
};

class ConnectorWorker {
 public:
  virtual ~ConnectorWorker() = default;

  // Asked before the cache is allocated, per tensor-parallel rank: where that rank's cache
  // regions come from. nullopt: the engine allocates them from the heap. A connector whose
  // peers can map its memory returns its transfer agent's allocator (FerryConnector in direct
  // mode: a same-host pull is then one memcpy). The memory lives until the cache releases it
  // or the connector is destroyed, whichever comes first; the engine must not outlive it.
  virtual std::optional<kv::CacheMemory> CacheMemoryFor(int32_t /*rank*/) { return std::nullopt; }
  // Once, after the cache is allocated. The connector derives the geometry from `cache`
  // (kv::GeometryOf), never from configuration. `block_size_logical` is the scheduler's.
  virtual Status RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) = 0;
  // What the engine calls: every tensor-parallel rank's cache (rank r's holds the KV heads
  // `sharding` gives rank r; all share one block geometry and one logical block space). A
  // connector that supports TP moves each rank's heads with that rank's own transfer agent
  // and reports a request as loaded once every rank has it. The default serves TP 1 through
  // RegisterKvCache and refuses more ranks (Unimplemented).
  virtual Status RegisterKvCaches(std::span<kv::KvCache* const> rank_caches,
                                  const kv::HeadSharding& sharding, int32_t block_size_logical) {
    if (rank_caches.size() != 1 || sharding.tp_size() != 1) {
      return UnimplementedError("this KV connector supports tensor_parallel_size 1 only");
    }
    return RegisterKvCache(rank_caches[0], block_size_logical);
  }
  virtual void BindMetadata(const ConnectorMetadata& metadata) = 0;
  virtual void StartLoadKv() = 0;   // non-blocking
  virtual void AfterForward() = 0;  // stages SaveSpecs into the host buffer when configured
  virtual ConnectorOutput GetFinished() = 0;
  virtual void Shutdown() = 0;
};

}  // namespace kvferry::connector
