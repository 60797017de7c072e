// EngineLoop: a GenerationService that owns one engine::Engine (and its FerryConnector, when
// configured) on one dedicated engine thread.
//
// The engine thread loops: take queued submissions and aborts, AddRequest/Abort them, Step()
// while there is work, route each RequestOutput to its request's OutputChannel, publish the
// engine and connector statistics to ServerMetrics. HTTP threads only touch the inbox (under a
// mutex) and their own channels.
//
// Stop() (or the destructor) lets running requests finish until `drain_ms` has passed, then
// aborts the rest, keeps stepping until held blocks are released (bounded by the same deadline),
// and joins the thread. After Stop(), Submit() answers with an Unavailable error output.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/connector/kv_transfer_config.h"
#include "kvferry/engine/engine.h"
#include "kvferry/kv_events/publisher.h"
#include "kvferry/server/generation_service.h"
#include "kvferry/server/instance.h"
#include "kvferry/server/server_metrics.h"

namespace kvferry::server {

struct EngineLoopOptions {
  engine::EngineConfig engine;  // connector pointers are filled in by Instance
  std::optional<connector::KvTransferConfig> kv_transfer;  // none: colocated only
  // Publish the prefix cache's block events (docs/kv_events.md); none: no events.
  std::optional<kv_events::PublisherOptions> kv_events;
  int64_t startup_timeout_ms = 60000;
};

class EngineLoop : public GenerationService {
 public:
  // Starts the engine thread, which creates the connector and the engine. Returns their
  // creation error (InvalidArgument for a bad config, Unavailable for a transport that cannot
  // start) or DeadlineExceeded after startup_timeout_ms. `metrics` may be null; it must outlive
  // the loop.
  static StatusOr<std::unique_ptr<EngineLoop>> Start(EngineLoopOptions options,
                                                     ServerMetrics* metrics);
  ~EngineLoop() override;
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  std::shared_ptr<OutputChannel> Submit(GenerateRequest request) override;
  void Abort(const std::string& request_id) override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  int32_t max_model_len() const override { return max_model_len_; }
  bool healthy() const override { return running_.load(); }

  // The bound side-channel port and engine id of the connector (0 / "" when colocated).
  int32_t side_channel_port() const;
  std::string engine_id() const { return engine_id_; }
  // The KV-event sockets as bound ("" without kv_events), the publisher's counters, and the
  // salt of the prefix cache's chain hashes.
  std::string kv_events_endpoint() const { return kv_events_endpoint_; }
  std::string kv_events_replay_endpoint() const { return kv_events_replay_endpoint_; }
  kv_events::PublisherStats kv_events_stats() const;
  uint64_t prefix_hash_salt() const { return prefix_hash_salt_; }
  // The KV pool's size in logical blocks, and the logical block size (what an instance
  // registers in a cluster).
  int64_t num_kv_blocks_total() const { return num_kv_blocks_total_; }
  int32_t block_size_logical() const { return block_size_logical_; }

  void Stop(int64_t drain_ms = 10000);

 private:
  explicit EngineLoop(ServerMetrics* metrics);
  void Run(EngineLoopOptions options);
  Status Init(EngineLoopOptions options);
  void DrainInbox();
  void Dispatch(std::vector<engine::RequestOutput> outputs);
  void Shutdown();
  void PublishStats();
  void PublishKvEvents();

  ServerMetrics* const metrics_;
  std::optional<tokenizer::Tokenizer> tokenizer_;  // the engine's; set before Start() returns
  int32_t max_model_len_ = 0;
  int64_t num_kv_blocks_total_ = 0;
  int32_t block_size_logical_ = 0;
  std::string engine_id_;
  // Set in Init (before Start returns), stopped in Shutdown, destroyed with the loop.
  std::unique_ptr<kv_events::Publisher> kv_events_;
  std::string kv_events_endpoint_;
  std::string kv_events_replay_endpoint_;
  uint64_t prefix_hash_salt_ = 0;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> drain_deadline_ms_{0};  // steady-clock ms of the drain's end
  std::thread thread_;

  // Engine-thread state.
  std::unique_ptr<Instance> instance_;
  engine::Engine* engine_ = nullptr;                // instance_'s
  connector::FerryConnector* connector_ = nullptr;  // instance_'s; null colocated
  std::map<std::string, std::shared_ptr<OutputChannel>> live_;

  // Inbox from HTTP threads.
  struct Submission {
    GenerateRequest request;
    std::shared_ptr<OutputChannel> channel;
  };
  Mutex mu_;
  CondVar cv_;
  std::vector<Submission> submissions_ GUARDED_BY(mu_);
  std::vector<std::string> aborts_ GUARDED_BY(mu_);
  bool init_done_ GUARDED_BY(mu_) = false;
  Status init_status_ GUARDED_BY(mu_);
  bool accepting_ GUARDED_BY(mu_) = false;
};

}  // namespace kvferry::server
