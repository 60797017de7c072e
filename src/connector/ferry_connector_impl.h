// FerryConnectorImpl: the state both halves of the connector share, and their implementation.
//
//   ferry_connector.cc  factory, registration (cache / host buffer / generation table), side
//                       channel, the scheduler half, P's leases and host-buffer staging
//   recv_path.cc        D's worker half: handshakes, pulls, generation checks, failures
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

#include "connector/handshake_wire.h"
#include "connector/lease_table.h"
#include "connector/side_channel.h"
#include "connector/side_channel_keys.h"
#include "connector/transfer_plan.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"
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
  Status RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) override;
  void BindMetadata(const ConnectorMetadata& metadata) override;
  void StartLoadKv() override;
  void AfterForward() override;
  ConnectorOutput GetFinished() override;
  void Shutdown() override;

 private:
  FerryConnectorImpl* c_;
};

// A background handshake with one remote engine.
struct HandshakeJob {
  Mutex mu;
  bool done GUARDED_BY(mu) = false;
  std::optional<StatusOr<HandshakeMetadata>> result GUARDED_BY(mu);
  std::thread thread;
};

// What D knows about one remote engine.
struct PeerEntry {
  enum class State { kHandshaking, kReady };
  State state = State::kHandshaking;
  std::shared_ptr<HandshakeJob> job;
  HandshakeMetadata meta;
  transfer::PeerHandle peer;
  std::vector<transfer::RegionHandle> remote_regions;
};

// One load on D.
struct RecvState {
  enum class Phase { kWaitHandshake, kPreGeneration, kData, kPostGeneration };
  LoadSpec spec;
  Phase phase = Phase::kWaitHandshake;
  PullPlan plan;
  std::vector<kv::LogicalBlockId> invalid_on_failure;  // D's logical blocks of the pulled range
  std::vector<uint64_t> expected_generations;          // per plan.remote_logical_blocks
  // Registered scratch: staging slots (staged pulls) then one uint64 per remote logical block.
  std::unique_ptr<std::byte[]> scratch;
  uint64_t scratch_bytes = 0;
  uint64_t generations_offset = 0;
  std::optional<transfer::RegionHandle> scratch_region;
  std::optional<transfer::XferHandle> xfer;
  Deadline::Clock::time_point data_posted_at{};
  uint64_t data_bytes = 0;
  uint64_t data_descriptors = 0;
};

class FerryConnectorImpl : public FerryConnector {
 public:
  FerryConnectorImpl(const KvTransferConfig& config, const FerryConnectorOptions& options,
                     std::string engine_id, std::unique_ptr<transfer::Agent> agent,
                     SideChannelKeys keys);
  ~FerryConnectorImpl() override;

  ConnectorScheduler* scheduler() override { return &scheduler_; }
  ConnectorWorker* worker() override { return &worker_; }
  ConnectorStats Stats() const override;
  const KvTransferConfig& config() const override { return config_; }
  const std::string& engine_id() const override { return engine_id_; }
  int32_t side_channel_port() const override { return server_port_.load(); }

  // Test hook: runs on the engine thread after a pull's data READ completed and before the
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
  Status Register(kv::KvCache* cache, int32_t block_size_logical);
  std::string HandleSideChannel(std::string_view request);  // server thread
  bool TokenMatches(const std::string& presented) const;
  // D: tells P over the side channel, in the background, that a request will not be pulled.
  void ReleaseRemoteAsync(const KvTransferParams& remote);
  void ReapReleaseJobs(bool all);
  void StagePendingSaves(const std::string* only_request);
  Status StageOne(const PendingSave& save);
  // P: the kv_transfer_params (and lease) of a finished remote-decode request, offering only
  // the blocks whose bytes are good; an error when policy `fail` and some are not.
  FinishResult OfferBlocks(const RequestView& request,
                           std::span<const kv::LogicalBlockId> block_ids);
  void CollectProducerFinished();
  void Shutdown();

  // --- recv_path.cc ---
  void StartLoads();
  void PollLoads();
  void EnsureHandshake(const KvTransferParams& remote);
  void AdvanceHandshakes();
  // Each returns the load's failure, if any; the caller then calls FailLoad.
  Status StartPull(RecvState& r, PeerEntry& peer);
  Status PostData(RecvState& r, PeerEntry& peer);
  Status PostGenerationRead(RecvState& r, PeerEntry& peer, bool with_notification);
  Status Advance(RecvState& r, bool* finished);
  void FinishLoad(const std::string& id, RecvState& r);
  void FailLoad(const std::string& id, RecvState& r, LoadOutcome kind, const Status& why);
  void ReleaseScratch(RecvState& r);
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
  std::unique_ptr<transfer::Agent> agent_;
  SchedulerHalf scheduler_{this};
  WorkerHalf worker_{this};

  // Set once by RegisterKvCache (engine thread), read-only afterwards.
  kv::KvCache* cache_ = nullptr;
  kv::CacheSpec spec_;
  std::optional<kv::BlockGeometry> geometry_;
  int32_t block_size_logical_ = 0;
  std::string compat_hash_;
  std::vector<transfer::RegionHandle> local_regions_;  // cache or host-buffer regions
  std::vector<std::byte*> host_regions_;  // P's host buffer (kv_buffer_device cpu), agent-owned
  std::unique_ptr<LeaseTable> leases_;
  transfer::RegionHandle generation_region_;
  std::string handshake_reply_;  // pre-encoded; the server thread reads it
  std::unique_ptr<SideChannelServer> server_;
  std::atomic<int32_t> server_port_{0};
  bool shut_down_ = false;

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
