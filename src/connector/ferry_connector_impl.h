// FerryConnectorImpl: the facade of one FerryConnector — it owns the parts and dispatches the two
// halves of connector.h to them:
//
//   Registration   (registration.h)   every rank's agent, cache/host-buffer registration, the
//                                     lease table's memory, the side channel, shutdown order
//   Producer       (producer.h)       P: staging, offers and leases, notifications, releases
//   Consumer       (consumer.h)       D: handshakes, per-rank pulls, generation checks, failures
//   RemoteReleaser (remote_release.h) D: "free this request's blocks" to P, in the background
//
// The scheduler half decides what D loads (GetNumNewMatchedTokens, UpdateStateAfterAlloc, the
// pending LoadSpecs) and hands P's finished requests to the Producer; the worker half forwards
// to Registration, Consumer and Producer. The halves meet only in ConnectorMetadata and
// ConnectorOutput, except at RequestFinished, where D asks the Consumer whether a pull is still
// writing into the request's blocks and P's Producer stages the request's last chunk before it
// leases the blocks (both must be answered before the blocks are freed).
//
// Tensor parallelism (docs/connector.md, "Rank mapping"): an instance of tp_size ranks has one
// scheduler half and, per rank, a RankEndpoint — its own transfer agent, its own KV cache (its
// KV heads) registered there, its own copy of the lease generation table.
//
// Thread-safety: every method runs on the engine thread (connector.h), except the side-channel
// handler (server thread; Producer::HandleSideChannel), handshake and release jobs (own
// threads) and Stats() (any thread; the context's StatsBox).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "connector/connector_context.h"
#include "connector/consumer.h"
#include "connector/producer.h"
#include "connector/registration.h"
#include "connector/remote_release.h"
#include "kvferry/connector/ferry_connector.h"

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
  bool IsConsumerRequest(const KvTransferParams* p) const;
  FinishResult ConsumerRequestFinished(const RequestView& request, const KvTransferParams& p);

  FerryConnectorImpl* c_;
  std::vector<LoadSpec> pending_loads_;
  std::set<std::string> loads_issued_;  // D: load emitted (GetNumNewMatchedTokens answers 0)
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

class FerryConnectorImpl : public FerryConnector {
 public:
  FerryConnectorImpl(const KvTransferConfig& config, const FerryConnectorOptions& options,
                     std::string engine_id, std::vector<std::unique_ptr<transfer::Agent>> agents,
                     SideChannelKeys keys);
  ~FerryConnectorImpl() override;

  ConnectorScheduler* scheduler() override { return &scheduler_; }
  ConnectorWorker* worker() override { return &worker_; }
  ConnectorStats Stats() const override { return ctx_.stats.Snapshot(); }
  const KvTransferConfig& config() const override { return ctx_.config; }
  const std::string& engine_id() const override { return ctx_.engine_id; }
  int32_t side_channel_port() const override { return registration_.side_channel_port(); }
  int32_t tp_size() const override { return registration_.tp_size(); }
  std::string AgentName(int32_t rank) const override { return registration_.AgentName(rank); }

  // Test hooks (consumer.h, producer.h); set before the engine steps.
  AfterDataReadHook after_data_read_for_test;
  StageFaultHook stage_fault_for_test;

 private:
  friend class SchedulerHalf;
  friend class WorkerHalf;

  Status Register(std::span<kv::KvCache* const> caches, const kv::HeadSharding& sharding,
                  int32_t block_size_logical);
  void InstallFaultInjectionFromEnv();
  void Shutdown();

  ConnectorContext ctx_;
  Registration registration_;
  RemoteReleaser releaser_{&ctx_};
  Producer producer_{&ctx_, &registration_, &stage_fault_for_test};
  Consumer consumer_{&ctx_, &registration_, &releaser_, &after_data_read_for_test};
  SchedulerHalf scheduler_{this};
  WorkerHalf worker_{this};
};

}  // namespace kvferry::connector::internal
