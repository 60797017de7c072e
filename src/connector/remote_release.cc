#include "connector/remote_release.h"

#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"

namespace kvferry::connector::internal {

void RemoteReleaser::Release(const KvTransferParams& remote) {
  auto job = std::make_unique<Job>();
  Job* raw = job.get();
  job->thread = std::thread(
      [ctx = ctx_, raw, host = remote.remote_host, port = remote.remote_port,
       curve = ctx_->keys.ForPeer(remote.remote_engine_id, remote.remote_host),
       request = EncodeReleaseRequest(remote.remote_request_id, ctx_->config.auth_token),
       id = remote.remote_request_id,
       deadline = Deadline::AfterMs(ctx_->config.handshake_timeout_ms)] {
        StatusOr<std::string> reply =
            curve.ok() ? FetchOverSideChannel(host, port, request, deadline, *curve)
                       : StatusOr<std::string>(curve.status());
        Status st = reply.ok() ? DecodeOkReply(*reply) : reply.status();
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
