// Consumer: D's side of one FerryConnector — the remote engines it knows (background
// handshakes, each D rank's connections to the P ranks it reads from), the loads the scheduler
// bound this step, the pulls in flight, and the loads whose request finished while they ran.
//
// A load waits for the remote engine's handshake (every P rank's metadata, fetched once per
// engine by a background thread), then becomes one read per (D rank, P rank it reads heads
// from) — kv::PlanHeadReads — each through its D rank's own agent. A read goes through
// (SourceRead::Phase), advanced by Start/Poll:
//   kPreGeneration   only when P's kv_transfer_params carried no generations: read them first
//   kData            the coalesced READ of the P rank's kernel blocks (its heads) into the D
//                    rank's cache, or staging
//   kPostGeneration  READ of the same blocks' generations in that P rank's table, carrying the
//                    notification "<P request id>:<D tp_size>" to that P rank
// then the generations are compared and a staged read is re-laid out into the D rank's cache
// (its heads). The load is reported once no read is in flight: in finished_recving (pulled
// when every read is done, else failed with the first failure and the load's LOGICAL blocks as
// invalid), or in finished_sending for a load whose request finished meanwhile (its blocks may
// be freed now).
//
// Interface (FerryConnectorImpl dispatches): Bind the step's LoadSpecs (BindMetadata), Start
// them (StartLoadKv, GetFinished), Poll into the connector output (GetFinished), and
// AbortIfReading at RequestFinished ("is this finished request still being read?").
//
// Thread-safety: engine thread only; handshake jobs run on their own threads and write only
// their HandshakeJob, under its mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "connector/connector_context.h"
#include "connector/handshake_wire.h"
#include "connector/registration.h"
#include "connector/remote_release.h"
#include "connector/scratch_pool.h"
#include "connector/transfer_plan.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/connector.h"

namespace kvferry::connector::internal {

// Test hook: on the engine thread after a read's data READ completed and before its generation
// READ is posted — the window in which a lease running out must be detected.
using AfterDataReadHook = std::function<void(const std::string& request_id)>;

// Every rank's metadata of one remote engine, and whether its ranks serve their own side
// channels (a split engine: its first reply carried fewer ranks than its tp_size).
struct RemoteEngine {
  std::vector<HandshakeMetadata> ranks;
  bool split = false;
};

// A background handshake with one remote engine.
struct HandshakeJob {
  Mutex mu;
  bool done GUARDED_BY(mu) = false;
  std::optional<StatusOr<RemoteEngine>> result GUARDED_BY(mu);
  std::thread thread;
};

// What D knows about one remote engine (all of its ranks).
struct PeerEntry {
  enum class State { kHandshaking, kReady };
  State state = State::kHandshaking;
  std::shared_ptr<HandshakeJob> job;
  std::string host;  // the side channel the handshake went to: another one is another process
  int32_t port = 0;
  std::vector<HandshakeMetadata> ranks;  // P's ranks, in rank order
  kv::HeadSharding sharding;             // P's
  // reads[d]: D rank d's head reads (which P ranks, which heads); links[d][p]: D rank d's
  // agent's connection to P rank p, for the pairs D reads through.
  std::vector<std::vector<kv::HeadRead>> reads;
  std::vector<std::vector<std::optional<transfer::PeerHandle>>> links;
  std::vector<std::vector<transfer::RegionHandle>> remote_regions;  // per P rank
  // A split P (its ranks serve their own side channels): the ranks no D rank of this engine
  // reads from (replicas), which hear of a pull only through a release from D's rank 0.
  std::vector<int32_t> unread_ranks;
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

class Consumer {
 public:
  // `after_data_read` may point to an empty function; it and the rest must outlive the consumer.
  Consumer(ConnectorContext* ctx, Registration* registration, RemoteReleaser* releaser,
           const AfterDataReadHook* after_data_read);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  void Bind(std::span<const LoadSpec> loads);
  // Starts the bound loads and those whose handshake has finished, then polls.
  void Start();
  // Advances every read; appends the loads that ended to `out`.
  void Poll(ConnectorOutput* out);
  // True when a pull may still write into the request's blocks (bound or in flight): the load
  // is then reported in finished_sending once it has stopped, and the blocks must wait for it.
  bool AbortIfReading(const std::string& request_id);
  // Joins the handshakes, cancels every transfer, closes every peer and gives back the scratch
  // (while the agents live).
  void Shutdown();

 private:
  // --- consumer_peers.cc: the remote engines ---
  void EnsureHandshake(const KvTransferParams& remote);
  void AdvanceHandshakes();
  Status ConnectRanks(PeerEntry& peer, bool split);
  void FailWaitingLoads(const std::string& engine, const Status& why);
  void DropPeer(const std::string& engine_id);

  // --- consumer.cc: the loads ---
  void StartPull(RecvState& r, PeerEntry& peer);
  Status CheckPullParams(const RecvState& r, const PeerEntry& peer) const;
  // Each returns a read's failure, if any; the caller records it (RecordFailure).
  Status StartRead(RecvState& r, SourceRead& read, PeerEntry& peer);
  Status PostData(SourceRead& read, PeerEntry& peer);
  Status PostGenerationRead(const RecvState& r, SourceRead& read, PeerEntry& peer,
                            bool with_notification);
  Status Advance(RecvState& r, SourceRead& read);
  Status CheckGenerations(const SourceRead& read) const;
  Status FinishRead(RecvState& r, SourceRead& read);
  void PollRead(RecvState& r, SourceRead& read);
  void RecordFailure(RecvState& r, SourceRead* read, LoadOutcome kind, const Status& why);
  bool InFlight(const RecvState& r) const;
  void PollLoads();
  void FinishLoad(const std::string& id, RecvState& r);
  void FailLoad(const std::string& id, RecvState& r);
  // Where a load that ended is reported: finished_sending when its request finished meanwhile.
  bool ReportAborted(const std::string& id);
  void ReleaseScratch(SourceRead& read);
  ScratchPool& PoolOf(int32_t d_rank);

  ConnectorContext* const ctx_;
  Registration* const reg_;
  RemoteReleaser* const releaser_;
  const AfterDataReadHook* const after_data_read_;

  std::vector<LoadSpec> bound_loads_;
  std::map<std::string, PeerEntry> peers_;  // by remote engine id
  std::map<std::string, RecvState> recvs_;  // by local request id
  std::set<std::string> aborted_loads_;     // finished while their pull was in flight
  std::vector<std::unique_ptr<ScratchPool>> scratch_pools_;  // per D rank, from the first pull
  ConnectorOutput out_;                                      // what ended since the last Poll
};

}  // namespace kvferry::connector::internal
