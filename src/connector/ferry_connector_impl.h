// FerryConnectorImpl: the state both halves of the connector share, and their implementation.
//
//   ferry_connector.cc  factory, registration (every rank's cache / host buffer / generation
//                       table), side channel, the scheduler half, the worker adapters
//   producer.cc         P: host-buffer staging, leases, notifications per rank
//   recv_path.cc        D's worker half: handshakes, per-rank pulls, generation checks, failures
//
// Tensor parallelism (docs/connector.md, "Rank mapping"): an instance of tp_size ranks has one
// scheduler half and, per rank, a RankEndpoint — its own transfer agent, its own KV cache (its
// KV heads) registered there, its own copy of the lease generation table. A D rank reads its
// heads from the P rank(s) holding them, through its own agent; a request's load is reported
// once every D rank's reads have ended.
//
// The scheduler half and the worker half are the two adapter objects below; they only talk
// through ConnectorMetadata / ConnectorOutput, except for read-only configuration and the
// lease table (P's blocks and their generations, which RequestFinished needs immediately).
//
// Thread-safety: every method runs on the engine thread (connector.h), except the side-channel
// handler (server thread; reads immutable state), handshake jobs (own threads; write only
// their HandshakeJob under its mutex) and Stats() (any thread; stats_mu_).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "connector/agent_cache_memory.h"
#include "connector/handshake_wire.h"
#include "connector/lease_table.h"
#include "connector/scratch_pool.h"
#include "connector/side_channel.h"
#include "connector/side_channel_keys.h"
#include "connector/transfer_plan.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/head_sharding.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::connector::internal {

class FerryConnectorImpl;

class SchedulerHalf : public ConnectorScheduler {
 public:
  explicit SchedulerHalf(FerryConnectorImpl* c) : c_(c) {}
  MatchResult GetNumNewMatchedTokens(const RequestView& request,
                                     int32_t num_local_computed_tokens) override;
  void UpdateStateAfterAlloc(const RequestView& request,
                             std::span<const kv::LogicalBlockId> block_ids,
                             int32_t num_external_tokens) override;
  void OnTokensComputed(const RequestView& request, std::span<const kv::LogicalBlockId> block_ids,
                        int32_t token_begin, int32_t token_end) override;
  FinishResult RequestFinished(const RequestView& request,
                               std::span<const kv::LogicalBlockId> block_ids) override;
  ConnectorMetadata BuildConnectorMeta() override;
  void UpdateConnectorOutput(const ConnectorOutput& output) override;

 private:
  FerryConnectorImpl* c_;
};

class WorkerHalf : public ConnectorWorker {
 public:
  explicit WorkerHalf(FerryConnectorImpl* c) : c_(c) {}
  std::optional<kv::CacheMemory> CacheMemoryFor(int32_t rank) override;
  Status RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) override;
  Status RegisterKvCaches(std::span<kv::KvCache* const> rank_caches,
                          const kv::HeadSharding& sharding, int32_t block_size_logical) override;
  void BindMetadata(const ConnectorMetadata& metadata) override;
  void StartLoadKv() override;
  void AfterForward() override;
  ConnectorOutput GetFinished() override;
  void Shutdown() override;

 private:
  FerryConnectorImpl* c_;
};

// One tensor-parallel rank's side of the transfer: what its agent registered and serves.
struct RankEndpoint {
  std::unique_ptr<transfer::Agent> agent;
  kv::KvCache* cache = nullptr;
  kv::CacheSpec spec;                                 // the rank's cache: its KV heads
  std::vector<transfer::RegionHandle> local_regions;  // cache or host-buffer regions
  std::vector<std::byte*> host_regions;      // P's host buffer (kv_buffer_device cpu), agent-owned
  transfer::RegionHandle generation_region;  // this rank's copy of the lease generations
  // Direct mode: the cache's regions, allocated by `agent` (the engine asked CacheMemoryFor).
  std::shared_ptr<AgentCacheMemory> cache_memory;
  std::unique_ptr<ScratchPool> scratch_pool;  // D: created with the first pull
};

// A background handshake with one remote engine.
struct HandshakeJob {
  Mutex mu;
  bool done GUARDED_BY(mu) = false;
  std::optional<StatusOr<std::vector<HandshakeMetadata>>> result GUARDED_BY(mu);
  std::thread thread;
};

// What D knows about one remote engine (all of its ranks).
struct PeerEntry {
  enum class State { kHandshaking, kReady };
  State state = State::kHandshaking;
  std::shared_ptr<HandshakeJob> job;
  std::vector<HandshakeMetadata> ranks;  // P's ranks, in rank order
  kv::HeadSharding sharding;             // P's
  // reads[d]: D rank d's head reads (which P ranks, which heads); links[d][p]: D rank d's
  // agent's connection to P rank p, for the pairs D reads through.
  std::vector<std::vector<kv::HeadRead>> reads;
  std::vector<std::vector<std::optional<transfer::PeerHandle>>> links;
  std::vector<std::vector<transfer::RegionHandle>> remote_regions;  // per P rank
};

// One D rank's read from one P rank, within one load.
struct SourceRead {
  enum class Phase { kPreGeneration, kData, kPostGeneration, kDone, kFailed };
  int32_t d_rank = 0;
  kv::HeadRead heads;
  Phase phase = Phase::kData;
  PullPlan plan;
  std::vector<uint64_t> expected_generations;  // per plan.remote_logical_blocks
  // Registered scratch from D rank's ScratchPool: staging slots (staged pulls) then one uint64
  // per remote logical block; `scratch_bytes` of its capacity are this read's.
  std::optional<ScratchArea> scratch;
  uint64_t scratch_bytes = 0;
  uint64_t generations_offset = 0;
  std::optional<transfer::XferHandle> xfer;
  uint64_t data_bytes = 0;
  uint64_t data_descriptors = 0;
  bool data_by_memcpy = false;  // transfer::XferInfo::by_memcpy of the data READ
};

// One load on D: every D rank's reads.
struct RecvState {
  LoadSpec spec;
  bool started = false;  // false: waiting for the remote engine's handshake
  std::vector<SourceRead> reads;
  std::vector<kv::LogicalBlockId> invalid_on_failure;  // D's logical blocks of the pulled range
  std::optional<LoadOutcome> failure;                  // the first read failure, if any
  Status failure_status;
  Deadline::Clock::time_point posted_at{};
};

class FerryConnectorImpl : public FerryConnector {
 public:
  FerryConnectorImpl(const KvTransferConfig& config, const FerryConnectorOptions& options,
                     std::string engine_id, std::vector<std::unique_ptr<transfer::Agent>> agents,
                     SideChannelKeys keys);
  ~FerryConnectorImpl() override;

  ConnectorScheduler* scheduler() override { return &scheduler_; }
  ConnectorWorker* worker() override { return &worker_; }
  ConnectorStats Stats() const override;
  const KvTransferConfig& config() const override { return config_; }
  const std::string& engine_id() const override { return engine_id_; }
  int32_t side_channel_port() const override { return server_port_.load(); }
  int32_t tp_size() const override { return static_cast<int32_t>(ranks_.size()); }
  std::string AgentName(int32_t rank) const override;

  // Test hook: runs on the engine thread after a read's data READ completed and before its
  // generation READ is posted — the window in which a lease running out must be detected.
  std::function<void(const std::string& request_id)> after_data_read_for_test;
  // Test hook: runs on the engine thread before P stages tokens [token_begin, ...) of a request
  // into its host buffer; returning true makes that staging fail as a copy error would.
  std::function<bool(const std::string& request_id, int32_t token_begin)> stage_fault_for_test;

 private:
  friend class SchedulerHalf;
  friend class WorkerHalf;

  struct PendingSave;

  // --- ferry_connector.cc ---
  Status Register(std::span<kv::KvCache* const> caches, const kv::HeadSharding& sharding,
                  int32_t block_size_logical);
  Status RegisterRank(int32_t rank, kv::KvCache* cache);
  Status MakeLeaseTable(int32_t num_blocks_logical);
  std::optional<kv::CacheMemory> CacheMemoryFor(int32_t rank);
  Status StartServing(int32_t block_size_logical);
  std::string HandleSideChannel(std::string_view request);  // server thread
  bool TokenMatches(const std::string& presented) const;
  // D: tells P over the side channel, in the background, that a request will not be pulled
  // (any more): P ends its lease on every rank.
  void ReleaseRemoteAsync(const KvTransferParams& remote);
  void ReapReleaseJobs(bool all);
  void Shutdown();

  // --- producer.cc ---
  void StagePendingSaves(const std::string* only_request);
  Status StageOne(const PendingSave& save);
  // P: the kv_transfer_params (and lease) of a finished remote-decode request, offering only
  // the blocks whose bytes are good; an error when policy `fail` and some are not.
  FinishResult OfferBlocks(const RequestView& request,
                           std::span<const kv::LogicalBlockId> block_ids);
  void CollectProducerFinished();
  // P: one D rank's notification from P rank `rank`; ends the lease once every P rank has
  // heard from all the D ranks that read from it.
  void NoteNotification(int32_t rank, const transfer::Notification& n);
  void EndLease(const std::string& request_id);

  // --- recv_path.cc ---
  void StartLoads();
  void PollLoads();
  void EnsureHandshake(const KvTransferParams& remote);
  void AdvanceHandshakes();
  Status ConnectRanks(PeerEntry& peer);
  void StartPull(RecvState& r, PeerEntry& peer);
  // Each returns a read's failure, if any; the caller records it (RecordFailure).
  Status StartRead(RecvState& r, SourceRead& read, PeerEntry& peer);
  Status PostData(SourceRead& read, PeerEntry& peer);
  Status PostGenerationRead(const RecvState& r, SourceRead& read, PeerEntry& peer,
                            bool with_notification);
  Status Advance(RecvState& r, SourceRead& read);
  Status FinishRead(RecvState& r, SourceRead& read);
  void RecordFailure(RecvState& r, SourceRead* read, LoadOutcome kind, const Status& why);
  bool InFlight(const RecvState& r) const;
  void FinishLoad(const std::string& id, RecvState& r);
  void FailLoad(const std::string& id, RecvState& r);
  void ReleaseScratch(SourceRead& read);
  void DropPeer(const std::string& engine_id);

  template <typename F>
  void UpdateStats(F f) {
    MutexLock lock(&stats_mu_);
    f(stats_);
  }

  const KvTransferConfig config_;
  const SideChannelKeys keys_;  // CURVE material, or the plaintext rules
  const FerryConnectorOptions options_;
  const std::string engine_id_;
  std::vector<RankEndpoint> ranks_;  // one per TP rank, agents from the factory
  SchedulerHalf scheduler_{this};
  WorkerHalf worker_{this};

  // Set once by RegisterKvCaches (engine thread), read-only afterwards.
  bool registered_ = false;
  kv::HeadSharding sharding_;  // this instance's KV heads over its ranks
  std::optional<kv::BlockGeometry> geometry_;
  int32_t block_size_logical_ = 0;
  std::string compat_hash_;
  std::unique_ptr<LeaseTable> leases_;  // one generation copy per rank
  std::string handshake_reply_;         // pre-encoded, every rank's metadata
  std::unique_ptr<SideChannelServer> server_;
  std::atomic<int32_t> server_port_{0};
  bool shut_down_ = false;
  // MakeLeaseTable: nothing the agents registered is the engine's, so Shutdown keeps them.
  bool agents_outlive_shutdown_ = false;

  // Scheduler half (engine thread).
  std::vector<LoadSpec> pending_loads_;
  std::vector<std::string> pending_holds_;
  std::set<std::string> loads_issued_;   // D: load emitted (GetNumNewMatchedTokens answers 0)
  std::set<std::string> remote_decode_;  // P: requests that prefill for a remote reader

  // Worker half (engine thread).
  struct PendingSave {
    std::string request_id;
    std::vector<kv::LogicalBlockId> block_ids;
    int32_t token_begin = 0;
    int32_t token_end = 0;
  };
  std::vector<PendingSave> pending_saves_;
  // P, host buffer: [first, end) of the tokens this request computed itself since it was last
  // admitted (tokens before `first` came from P's prefix cache, possibly from a request that
  // was never staged). A chunk not starting at `end` means a new admission (preemption).
  struct ComputedRange {
    int32_t first = 0;
    int32_t end = 0;
  };
  std::map<std::string, ComputedRange> computed_;
  // P, host buffer: the first token of a request whose staging failed (its blocks from there
  // on hold stale bytes and must never be offered).
  std::map<std::string, int32_t> stage_failed_from_;
  // P: notifications received per leased request, per rank, and the D TP size they name.
  struct Heard {
    int32_t d_tp_size = 0;
    std::vector<int32_t> per_rank;
  };
  std::map<std::string, Heard> heard_;
  std::vector<LoadSpec> bound_loads_;
  std::map<std::string, PeerEntry> peers_;  // by remote engine id
  std::map<std::string, RecvState> recvs_;  // by local request id
  std::set<std::string> aborted_loads_;     // D: finished while their pull was in flight
  ConnectorOutput pending_out_;             // drained by GetFinished
  struct ReleaseJob {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::vector<std::unique_ptr<ReleaseJob>> release_jobs_;

  // P: request ids D released over the side channel (server thread -> engine thread).
  Mutex released_mu_;
  std::vector<std::string> released_ GUARDED_BY(released_mu_);

  mutable Mutex stats_mu_;
  ConnectorStats stats_ GUARDED_BY(stats_mu_);
};

}  // namespace kvferry::connector::internal
