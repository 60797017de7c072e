#include "kvferry/cluster/cluster.h"

#include <chrono>
#include <map>
#include <thread>

#include "cluster/cluster_state.h"
#include "cluster/load_poller.h"
#include "cluster/registry_watcher.h"
#include "kvferry/cluster/registry_address.h"

namespace kvferry::cluster {

namespace {

// "http://host:port" from "host:port" or "http://host:port/" (the proxy's accepted spellings).
std::string NormalizeUrl(std::string url) {
  if (url.find("://") == std::string::npos) url = "http://" + url;
  while (url.ends_with('/')) url.pop_back();
  return url;
}

// Static members: one per URL, named by it; a URL in both lists serves both legs.
StatusOr<std::vector<MemberInfo>> StaticMembers(const ClusterOptions& o) {
  if (o.prefill_urls.empty()) return InvalidArgumentError("no --prefill instance given");
  if (o.decode_urls.empty()) return InvalidArgumentError("no --decode instance given");
  std::map<std::string, MemberInfo> by_url;
  for (int leg = 0; leg < 2; ++leg) {
    for (const std::string& raw : leg == 0 ? o.prefill_urls : o.decode_urls) {
      const std::string url = NormalizeUrl(raw);
      KVF_RETURN_IF_ERROR(ValidateHttpUrl(url).WithContext("upstream '" + raw + "'"));
      auto [it, inserted] = by_url.try_emplace(url);
      MemberInfo& m = it->second;
      const MemberRole role = leg == 0 ? MemberRole::kPrefill : MemberRole::kDecode;
      m.role = inserted || m.role == role ? role : MemberRole::kBoth;
      m.id = m.url = url;
    }
  }
  std::vector<MemberInfo> out;
  for (auto& [url, m] : by_url) out.push_back(std::move(m));
  return out;
}

}  // namespace

Cluster::Cluster(bool uses_registry) : uses_registry_(uses_registry) {}

Cluster::~Cluster() { Stop(); }

StatusOr<std::unique_ptr<Cluster>> Cluster::Start(ClusterOptions o) {
  const HealthPolicy health{o.eject_after_failures, o.probe_backoff_min_ms, o.probe_backoff_max_ms};
  std::unique_ptr<Cluster> c(new Cluster(!o.registry.empty()));
  c->state_ = std::make_unique<ClusterState>(o.routing, health, c->uses_registry_);
  if (c->uses_registry_) {
    KVF_ASSIGN_OR_RETURN(RegistryAddress address, ParseRegistryUrl(o.registry));
    RegistryWatcherOptions w;
    w.address = std::move(address);
    w.call_timeout_ms = o.registry_timeout_ms;
    w.health_interval_ms = o.registry_timeout_ms;
    w.retry_interval_ms = o.registry_timeout_ms;
    c->watcher_ = RegistryWatcher::Start(std::move(w), c->state_.get());
  } else {
    KVF_ASSIGN_OR_RETURN(std::vector<MemberInfo> members, StaticMembers(o));
    c->state_->SetMembers(std::move(members));
  }
  LoadPollerOptions poll{o.poll_interval_ms, o.poll_timeout_ms};
  if (o.fetch_metrics) poll.fetch = o.fetch_metrics;
  c->poller_ = LoadPoller::Start(std::move(poll), c->state_.get());
  return c;
}

bool Cluster::WaitRoutable(const Deadline& deadline) const {
  while (!state_->BothLegsHealthy()) {
    if (deadline.Expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void Cluster::Stop() {
  if (poller_) poller_->Stop();
  if (watcher_) watcher_->Stop();
}

StatusOr<std::unique_ptr<Route>> Cluster::Pick(Leg leg, const RouteRequest& request,
                                               const std::vector<std::string>& exclude,
                                               const std::string& avoid) {
  return state_->Pick(leg, request, exclude, avoid);
}

void Cluster::ObservePromptTokens(int64_t prompt_bytes, int64_t prompt_tokens) {
  state_->ObservePromptTokens(prompt_bytes, prompt_tokens);
}
void Cluster::CountRetry(Leg leg) { state_->CountRetry(leg); }
void Cluster::CountStreamAborted() { state_->CountStreamAborted(); }
void Cluster::CountDecodeOnly() { state_->CountDecodeOnly(); }
uint64_t Cluster::CountUpstreamAuthFailure(const std::string& upstream) {
  return state_->CountUpstreamAuthFailure(upstream);
}
std::string Cluster::RenderMetrics() const { return state_->RenderMetrics(); }
std::vector<MemberInfo> Cluster::MemberInfos(bool routable_only) const {
  std::vector<MemberInfo> out;
  for (ClusterState::MemberView& v : state_->Members()) {
    if (routable_only && v.state != MemberHealth::State::kHealthy) continue;
    out.push_back(std::move(v.info));
  }
  return out;
}

std::string Cluster::RenderTable() const { return state_->RenderTable(); }

}  // namespace kvferry::cluster
