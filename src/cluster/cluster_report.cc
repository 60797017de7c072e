// ClusterState's reports: the proxy's Prometheus text and the routing table (JSON). The metric
// names and what an operator reads from them are in docs/deploy.md, "Proxy metrics".
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cluster/cluster_state.h"
#include "kvferry/common/prometheus_text.h"

namespace kvferry::cluster {

namespace {

using Writer = PrometheusText;

const char* const kLegs[2] = {"prefill", "decode"};

// The registry's (etcd's) families, for a proxy that routes by it.
void RenderRegistry(Writer& w, bool connected, uint64_t disconnects,
                    const std::map<std::string, uint64_t>& events) {
  w.Family("kvferry:proxy_registry_connected", "gauge",
           "1 while the registry (etcd) answers; 0: routing to the last known members.");
  w.Sample({}, connected ? 1 : 0);
  w.Family("kvferry:proxy_registry_disconnects_total", "counter",
           "Times the registry stopped answering.");
  w.Sample({}, static_cast<double>(disconnects));
  w.Family("kvferry:proxy_registry_events_total", "counter",
           "Registry changes seen, by kind (invalid: a value that was ignored).");
  for (const char* kind : {"put", "delete", "invalid"}) {
    auto it = events.find(kind);
    w.Sample({{"kind", kind}}, it == events.end() ? 0 : static_cast<double>(it->second));
  }
}

}  // namespace

std::string ClusterState::RenderMetrics() const {
  MutexLock lock(&mu_);
  Writer w;
  if (uses_registry_) {
    RenderRegistry(w, registry_connected_, registry_disconnects_, registry_events_);
  }
  w.Family("kvferry:proxy_members", "gauge", "Members by role and health state.");
  for (int leg = 0; leg < 2; ++leg) {
    for (auto state : {MemberHealth::State::kJoining, MemberHealth::State::kHealthy,
                       MemberHealth::State::kEjected}) {
      int n = 0;
      for (const auto& [id, r] : members_) {
        const bool serves = leg == 0 ? CanPrefill(r.info.role) : CanDecode(r.info.role);
        if (serves && r.health.state() == state) ++n;
      }
      w.Sample({{"role", kLegs[leg]}, {"state", HealthStateName(state)}}, n);
    }
  }
  w.Family("kvferry:proxy_member_up", "gauge", "1 when the member gets traffic (healthy).");
  for (const auto& [id, r] : members_) {
    w.Sample({{"member", id}, {"role", MemberRoleName(r.info.role)}, {"url", r.info.url}},
             r.health.routable() ? 1 : 0);
  }
  w.Family("kvferry:proxy_member_inflight", "gauge", "Legs this proxy has in flight, by member.");
  for (const auto& [id, r] : members_) {
    for (int leg = 0; leg < 2; ++leg)
      w.Sample({{"member", id}, {"leg", kLegs[leg]}}, r.inflight[leg]);
  }
  w.Family("kvferry:proxy_member_requests_total", "counter",
           "Finished legs per member, by outcome (other: client gone or request refused).");
  for (const auto& [id, c] : counters_) {
    for (int leg = 0; leg < 2; ++leg) {
      if (c.routed[leg] == 0) continue;
      w.Sample({{"member", id}, {"leg", kLegs[leg]}, {"outcome", "ok"}}, c.ok[leg]);
      w.Sample({{"member", id}, {"leg", kLegs[leg]}, {"outcome", "failed"}}, c.failed[leg]);
      w.Sample({{"member", id}, {"leg", kLegs[leg]}, {"outcome", "other"}}, c.neutral[leg]);
    }
  }
  w.Family("kvferry:proxy_member_ejections_total", "counter", "Times a member was ejected.");
  for (const auto& [id, c] : counters_)
    w.Sample({{"member", id}}, static_cast<double>(c.ejections));
  w.Family("kvferry:proxy_routes_total", "counter", "Legs routed, by leg and reason.");
  for (const auto& [key, n] : route_reasons_) {
    const size_t slash = key.find('/');
    w.Sample({{"leg", std::string_view(key).substr(0, slash)},
              {"reason", std::string_view(key).substr(slash + 1)}},
             static_cast<double>(n));
  }
  w.Family("kvferry:proxy_retries_total", "counter", "Legs retried on another member.");
  for (int leg = 0; leg < 2; ++leg)
    w.Sample({{"leg", kLegs[leg]}}, static_cast<double>(retries_[leg]));
  w.Family("kvferry:proxy_streams_aborted_total", "counter",
           "Streams ended by an error event after tokens were sent (never retried).");
  w.Sample({}, static_cast<double>(streams_aborted_));
  w.Family("kvferry:proxy_decode_only_total", "counter",
           "Requests sent straight to a D that prefilled them (--disagg-min-uncached-tokens).");
  w.Sample({}, static_cast<double>(decode_only_));
  w.Family("kvferry:proxy_upstream_auth_failures_total", "counter",
           "Answers in which an upstream refused the proxy's own API key (--upstream-api-key).");
  for (const auto& [upstream, n] : upstream_auth_failures_)
    w.Sample({{"upstream", upstream}}, static_cast<double>(n));
  return w.Take();
}

std::string ClusterState::RenderTable() const {
  using nlohmann::json;
  MutexLock lock(&mu_);
  json members = json::array();
  for (const auto& [id, r] : members_) {
    const Counters& c = counters_.at(id);
    json m = {{"id", id},
              {"role", MemberRoleName(r.info.role)},
              {"url", r.info.url},
              {"engine_id", r.info.engine_id},
              {"engine", EngineKindName(r.engine)},
              {"side_channel", r.info.side_channel},
              {"model", r.info.model},
              {"state", HealthStateName(r.health.state())},
              {"inflight", {{"prefill", r.inflight[0]}, {"decode", r.inflight[1]}}},
              {"routed", {{"prefill", c.routed[0]}, {"decode", c.routed[1]}}},
              {"failed", {{"prefill", c.failed[0]}, {"decode", c.failed[1]}}},
              {"ejections", c.ejections}};
    if (r.load) {
      m["load"] = {{"pending_prefill_tokens", r.load->pending_prefill_tokens},
                   {"running", r.load->running},
                   {"waiting", r.load->waiting},
                   {"free_kv_blocks", r.load->free_kv_blocks},
                   {"total_kv_blocks", r.load->total_kv_blocks},
                   {"prefix_cache_hit_tokens", r.load->prefix_cache_hit_tokens}};
    }
    members.push_back(std::move(m));
  }
  json out = {{"members", std::move(members)}};
  if (uses_registry_) out["registry"] = {{"connected", registry_connected_}};
  return out.dump();
}

}  // namespace kvferry::cluster
