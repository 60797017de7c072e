// LoadPoller: reads each member's /metrics into ClusterState, every `interval_ms`: a healthy
// member's load every round, and a joining or ejected member's when its probe is due
// (member_health.h) — the poll is also the health probe. Each read runs on its own thread within
// `timeout_ms` (connect and read) and a round does not wait for it: a member cut off (its reads
// taking the whole timeout) is skipped while its read is in flight, and the others' figures stay
// fresh.
//
// Thread-safety: Start/Stop from one controlling thread; Stop joins every read in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_state.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::cluster {

// GET <url>/metrics within timeout_ms: the body of a 200 answer ("" for any other answer: the
// member is alive, its figures unknown); Unavailable / DeadlineExceeded naming the member when
// nothing answered. The proxy may pass its own (its transport: TLS, keys).
using MetricsFetcher =
    std::function<StatusOr<std::string>(const std::string& url, int64_t timeout_ms)>;
StatusOr<std::string> FetchMetricsPlainHttp(const std::string& url, int64_t timeout_ms);

struct LoadPollerOptions {
  int64_t interval_ms = 200;
  int64_t timeout_ms = 1000;
  MetricsFetcher fetch = FetchMetricsPlainHttp;
};

class LoadPoller {
 public:
  // `state` must outlive the poller.
  static std::unique_ptr<LoadPoller> Start(LoadPollerOptions options, ClusterState* state);
  ~LoadPoller();
  LoadPoller(const LoadPoller&) = delete;
  LoadPoller& operator=(const LoadPoller&) = delete;
  void Stop();

 private:
  LoadPoller(LoadPollerOptions options, ClusterState* state) : options_(options), state_(state) {}
  void Run();
  void PollRound();
  void JoinFinishedReaders(bool all);

  struct Reader {
    std::string id;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };

  const LoadPollerOptions options_;
  ClusterState* const state_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<Reader> readers_;  // the poller thread's
  std::thread thread_;
};

}  // namespace kvferry::cluster
