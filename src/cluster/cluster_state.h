// ClusterState: the proxy's table of members — who they are (static list or registry), whether
// they may get traffic (MemberHealth), their last polled load (MemberLoad) and what this proxy
// has in flight on each — and the one place that turns it into routing decisions (routing.h)
// and reports (/metrics, the routing table).
//
// Members leave the table when they leave the membership; their counters stay (Prometheus
// counters never go back). A member that re-registers under the same id with another URL or
// role starts over as joining.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/member_health.h"
#include "cluster/member_load.h"
#include "cluster/registry_listener.h"
#include "kvferry/cluster/member.h"
#include "kvferry/cluster/route.h"
#include "kvferry/cluster/routing.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::cluster {

class ClusterState : public RegistryListener {
 public:
  using Clock = std::chrono::steady_clock;

  // `now` is the clock request outcomes are stamped with (tests pass their own).
  ClusterState(RoutingConfig routing, HealthPolicy health, bool uses_registry,
               std::function<Clock::time_point()> now = Clock::now);

  void SetMembers(std::vector<MemberInfo> members) override;
  void SetRegistryConnected(bool connected) override;
  void CountRegistryEvent(std::string_view kind) override;

  // A member for `leg`, never one in `exclude` (ids tried already), `avoid` (the other leg's
  // member) only when nothing else is left. A D is never one whose engine (learnt from its
  // /metrics, member_load.h) differs from the engine of `avoid`, the request's P: P's KV is in
  // its engine's format, behind its engine's connector. An engine not known yet (a member
  // never polled) matches any. Unavailable when no member can take the leg.
  StatusOr<std::unique_ptr<Route>> Pick(Leg leg, const RouteRequest& request,
                                        const std::vector<std::string>& exclude,
                                        const std::string& avoid);
  // Learns how many tokens a byte of prompt text makes (P's usage.prompt_tokens), to estimate
  // the prefill tokens of requests in flight.
  void ObservePromptTokens(int64_t prompt_bytes, int64_t prompt_tokens);
  void CountRetry(Leg leg);
  void CountStreamAborted();  // a stream ended by an error event after tokens were sent
  void CountDecodeOnly();     // a request a D prefilled itself (conditional disaggregation)
  // An upstream ("host:port") refused the proxy's own API key; returns how many times it has
  // (1: the first, which the proxy logs).
  uint64_t CountUpstreamAuthFailure(const std::string& upstream);

  struct PollTarget {
    std::string id;
    std::string url;
  };
  // The members whose /metrics should be read now (healthy ones every round, the others when
  // their probe is due).
  std::vector<PollTarget> PollTargets(Clock::time_point now);
  // `url` guards against a member that re-registered elsewhere while it was polled.
  void OnPoll(const std::string& id, const std::string& url, const StatusOr<MemberLoad>& load,
              Clock::time_point now);

  struct MemberView {
    MemberInfo info;
    MemberHealth::State state;
    EngineKind engine = EngineKind::kUnknown;
    std::optional<MemberLoad> load;
    int32_t inflight_prefill = 0;
    int32_t inflight_decode = 0;
    uint64_t routed_prefill = 0;
    uint64_t routed_decode = 0;
  };
  std::vector<MemberView> Members() const;
  bool registry_connected() const;
  // A healthy member for each leg: both legs can be routed now.
  bool BothLegsHealthy() const;

  std::string RenderMetrics() const;  // Prometheus text
  std::string RenderTable() const;    // JSON: registry state and one object per member

 private:
  friend class Route;
  struct Record {
    Record(MemberInfo i, MemberHealth h) : info(std::move(i)), health(h) {}
    MemberInfo info;
    MemberHealth health;
    // The last engine a poll named: kept when a poll fails (an instance does not change engine
    // while it keeps its id and URL).
    EngineKind engine = EngineKind::kUnknown;
    std::optional<MemberLoad> load;
    int32_t inflight[2] = {0, 0};
    int64_t inflight_prefill_tokens = 0;
    uint64_t last_routed[2] = {0, 0};  // route_seq_ of its last leg of each kind
    bool logged_unanswered = false;    // the "does not answer" line of a joining member
  };
  struct Counters {
    std::string url;
    MemberRole role = MemberRole::kBoth;
    uint64_t routed[2] = {0, 0};
    uint64_t ok[2] = {0, 0};
    uint64_t failed[2] = {0, 0};
    uint64_t neutral[2] = {0, 0};
    uint64_t ejections = 0;
  };

  void Finish(const Route& route, Route::Outcome outcome);
  int64_t EstimateTokens(const RouteRequest& request) const REQUIRES(mu_);
  Candidate CandidateOf(Leg leg, const std::string& id, const Record& r) const REQUIRES(mu_);
  EngineKind EngineOf(const std::string& id) const REQUIRES(mu_);  // kUnknown: none such
  static Status NoneToPick(Leg leg, size_t candidates, size_t other_engine, EngineKind want,
                           bool uses_registry, bool registry_connected);
  void NoteEjected(const std::string& id, const Record& r, std::string_view why) REQUIRES(mu_);

  const RoutingConfig routing_;
  const HealthPolicy health_policy_;
  const bool uses_registry_;
  const std::function<Clock::time_point()> now_;
  mutable Mutex mu_;
  std::map<std::string, Record> members_ GUARDED_BY(mu_);
  std::map<std::string, Counters> counters_ GUARDED_BY(mu_);
  bool registry_connected_ GUARDED_BY(mu_) = false;
  uint64_t registry_disconnects_ GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> registry_events_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> route_reasons_ GUARDED_BY(mu_);  // "<leg>/<reason>"
  uint64_t route_seq_ GUARDED_BY(mu_) = 0;
  uint64_t retries_[2] GUARDED_BY(mu_) = {0, 0};
  uint64_t streams_aborted_ GUARDED_BY(mu_) = 0;
  uint64_t decode_only_ GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> upstream_auth_failures_ GUARDED_BY(mu_);  // by "host:port"
  double tokens_per_byte_ GUARDED_BY(mu_) = 1.0;
  bool tokens_per_byte_observed_ GUARDED_BY(mu_) = false;
};

}  // namespace kvferry::cluster
