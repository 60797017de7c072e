// LoadPoller: reads each member's /metrics on a background thread, every `interval_ms`, into
// ClusterState: a healthy member's load every round, and a joining or ejected member's when its
// probe is due (member_health.h) — the poll is also the health probe. Members are read in
// parallel, each within `timeout_ms` (connect and read), so one member cut off does not delay
// the others' figures.
//
// Thread-safety: Start/Stop from one controlling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

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

  const LoadPollerOptions options_;
  ClusterState* const state_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvferry::cluster
