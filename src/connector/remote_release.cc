#include "connector/remote_release.h"

#include <fmt/format.h>

#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"

namespace kvferry::connector::internal {

namespace {

// One release at host:port; the ranks that side channel ended the lease on.
StatusOr<ServedRanks> ReleaseAt(const std::string& host, int32_t port, const std::string& request,
                                const StatusOr<std::optional<CurveClientKeys>>& curve,
                                const Deadline& deadline) {
  KVF_RETURN_IF_ERROR(curve.status());
  KVF_ASSIGN_OR_RETURN(std::string reply,
                       FetchOverSideChannel(host, port, request, deadline, *curve));
  return DecodeOkReply(reply);
}

// The release at a split engine's rank `rank` (its side channel at rank 0's `port` + rank),
// which must answer for that rank (of `tp_size` ranks, when not 0).
Status ReleaseRank(const std::string& host, int32_t port, int32_t rank, int32_t tp_size,
                   const std::string& request,
                   const StatusOr<std::optional<CurveClientKeys>>& curve,
                   const Deadline& deadline) {
  KVF_ASSIGN_OR_RETURN(ServedRanks served, ReleaseAt(host, port + rank, request, curve, deadline));
  if (served.first_rank != rank || (tp_size != 0 && served.tp_size != tp_size)) {
    return FailedPreconditionError(fmt::format("{}:{} speaks for rank {} of {}, expected rank {}",
                                               host, port + rank, served.first_rank, served.tp_size,
                                               rank));
  }
  return Status::Ok();
}

// The release at `port` (the P engine's rank 0, which must answer as rank 0: the other ranks'
// ports are counted from it), then, for an engine whose ranks serve their own side channels, at
// every rank that reply did not speak for.
Status ReleaseEveryRank(const std::string& host, int32_t port, const std::string& request,
                        const StatusOr<std::optional<CurveClientKeys>>& curve,
                        const Deadline& deadline) {
  KVF_ASSIGN_OR_RETURN(ServedRanks first, ReleaseAt(host, port, request, curve, deadline));
  if (first.first_rank != 0) {
    return FailedPreconditionError(fmt::format("{}:{} speaks for rank {} of {}, expected rank 0",
                                               host, port, first.first_rank, first.tp_size));
  }
  for (int32_t r = first.num_ranks; r < first.tp_size; ++r) {
    KVF_RETURN_IF_ERROR(ReleaseRank(host, port, r, first.tp_size, request, curve, deadline));
  }
  return Status::Ok();
}

}  // namespace

void RemoteReleaser::Release(const KvTransferParams& remote, std::optional<int32_t> only_rank) {
  auto job = std::make_unique<Job>();
  Job* raw = job.get();
  job->thread = std::thread(
      [ctx = ctx_, raw, host = remote.remote_host, port = remote.remote_port,
       curve = ctx_->keys.ForPeer(remote.remote_engine_id, remote.remote_host),
       request = EncodeReleaseRequest(remote.remote_request_id, ctx_->config.auth_token),
       id = remote.remote_request_id, only_rank,
       deadline = Deadline::AfterMs(ctx_->config.handshake_timeout_ms)] {
        Status st = only_rank ? ReleaseRank(host, port, *only_rank, 0, request, curve, deadline)
                              : ReleaseEveryRank(host, port, request, curve, deadline);
        if (st.ok()) {
          ctx->stats.Update([](ConnectorStats& s) { ++s.notifications_sent; });
        } else {
          KVF_LOG_WARN("connector {}: release of {} at {}:{} failed ({}); P frees at lease end",
                       ctx->engine_id, id, host, port, st.ToString());
        }
        raw->done.store(true);
      });
  jobs_.push_back(std::move(job));
}

void RemoteReleaser::Reap(bool all) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (all || (*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace kvferry::connector::internal
