// Cluster: what the proxy knows of its prefill and decode instances (docs/deploy.md, "Running a
// cluster"): the members, from a static list (--prefill/--decode, no etcd needed) or from the
// registry (--registry etcd://...), their health and load (each member's /metrics polled), and
// the routing of each leg of a request to one of them (routing.h, route.h).
//
// With a registry, members that register join without a restart (after one successful poll),
// members whose key disappears (clean shutdown: at once; crash or partition: when the lease
// runs out) leave, and while etcd does not answer the last known members keep serving —
// /metrics says so (kvferry:proxy_registry_connected 0) and so does the log.
//
// Thread-safety: Pick, ObservePromptTokens, Count*, Render* and MemberInfos may be called from any
// thread; Start/Stop from one controlling thread (the destructor stops).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvferry/cluster/member.h"
#include "kvferry/cluster/route.h"
#include "kvferry/cluster/routing.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"

namespace kvferry::cluster {

class ClusterState;
class LoadPoller;
class RegistryWatcher;

struct ClusterOptions {
  std::vector<std::string> prefill_urls;  // static members (ignored with a registry)
  std::vector<std::string> decode_urls;
  std::string registry;  // etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]; empty: static
  RoutingConfig routing;
  int64_t poll_interval_ms = 200;
  int64_t poll_timeout_ms = 1000;
  int32_t eject_after_failures = 2;
  int64_t probe_backoff_min_ms = 500;
  int64_t probe_backoff_max_ms = 5000;
  int64_t registry_timeout_ms = 1000;  // each etcd call, and the health check's period
  // How a member's /metrics is read (url, timeout_ms -> body); null: plain HTTP. The proxy
  // passes its own when it reaches members through its own transport.
  std::function<StatusOr<std::string>(const std::string&, int64_t)> fetch_metrics;
};

class Cluster {
 public:
  // InvalidArgument for a bad URL or registry address, or a static list without a prefill or a
  // decode member. Starts polling (and watching the registry) at once.
  static StatusOr<std::unique_ptr<Cluster>> Start(ClusterOptions options);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // ClusterState::Pick: a member for `leg`, never one of `exclude`, `avoid` only as a last
  // resort. Unavailable (saying why) when there is none.
  StatusOr<std::unique_ptr<Route>> Pick(Leg leg, const RouteRequest& request,
                                        const std::vector<std::string>& exclude = {},
                                        const std::string& avoid = "");
  void ObservePromptTokens(int64_t prompt_bytes, int64_t prompt_tokens);
  void CountRetry(Leg leg);
  void CountStreamAborted();
  void CountDecodeOnly();  // a request sent straight to a D, which prefilled it
  // An upstream ("host:port") refused the proxy's own API key; returns how many times it has.
  uint64_t CountUpstreamAuthFailure(const std::string& upstream);

  // The members now, as registered (routable_only: those healthy now).
  std::vector<MemberInfo> MemberInfos(bool routable_only = false) const;
  std::string RenderMetrics() const;  // the proxy's /metrics
  std::string RenderTable() const;    // the proxy's /cluster (JSON)
  bool uses_registry() const { return uses_registry_; }
  // Waits until a healthy member serves each leg (the registry listed, the members probed):
  // true then, false at `deadline`. A proxy calls it before it listens, so that a restarted
  // proxy does not answer 503 for want of a first view.
  bool WaitRoutable(const Deadline& deadline) const;

  void Stop();

 private:
  explicit Cluster(bool uses_registry);

  const bool uses_registry_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<RegistryWatcher> watcher_;
  std::unique_ptr<LoadPoller> poller_;
};

}  // namespace kvferry::cluster
