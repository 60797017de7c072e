// RemoteReleaser: D tells P, over P's side channel and in the background, that a request's
// blocks will not be read (any more), so P ends that request's lease on every rank now rather
// than when it runs out. Used by D's scheduler half (a request that needs none of P's KV, or
// finished before its pull started) and by the Consumer (a pull that failed part-way).
//
// Each release is one short-lived thread bounded by the handshake timeout; a failed release is
// logged and costs nothing but P holding the blocks until the lease ends.
//
// Thread-safety: Release and Reap on the engine thread only; the jobs touch nothing but their
// copies and the context's stats.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "connector/connector_context.h"
#include "kvferry/connector/kv_transfer_params.h"

namespace kvferry::connector::internal {

class RemoteReleaser {
 public:
  explicit RemoteReleaser(ConnectorContext* ctx) : ctx_(ctx) {}
  ~RemoteReleaser() { Reap(/*all=*/true); }
  RemoteReleaser(const RemoteReleaser&) = delete;
  RemoteReleaser& operator=(const RemoteReleaser&) = delete;

  // Starts the release of `remote.remote_request_id` at `remote`'s side channel (every rank
  // of the engine), or, with `only_rank`, at that rank of a split engine only (its side
  // channel at remote_port + rank).
  void Release(const KvTransferParams& remote, std::optional<int32_t> only_rank = std::nullopt);
  // Joins the finished jobs (`all`: every job, waiting for those still running).
  void Reap(bool all);

 private:
  struct Job {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  ConnectorContext* const ctx_;
  std::vector<std::unique_ptr<Job>> jobs_;
};

}  // namespace kvferry::connector::internal
