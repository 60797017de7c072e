#include "cluster/cluster_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kvferry/common/logging.h"

namespace kvferry::cluster {

namespace {

int LegIndex(Leg leg) { return leg == Leg::kPrefill ? 0 : 1; }

bool Serves(MemberRole role, Leg leg) {
  return leg == Leg::kPrefill ? CanPrefill(role) : CanDecode(role);
}

}  // namespace

std::string_view LegName(Leg leg) { return leg == Leg::kPrefill ? "prefill" : "decode"; }

bool ClusterState::BothLegsHealthy() const {
  MutexLock lock(&mu_);
  bool legs[2] = {false, false};
  for (const auto& [id, r] : members_) {
    if (!r.health.routable()) continue;
    for (Leg leg : {Leg::kPrefill, Leg::kDecode}) legs[LegIndex(leg)] |= Serves(r.info.role, leg);
  }
  return legs[0] && legs[1];
}

Route::~Route() { Finish(Outcome::kNeutral); }

void Route::Finish(Outcome outcome) {
  if (finished_) return;
  finished_ = true;
  state_->Finish(*this, outcome);
}

ClusterState::ClusterState(RoutingConfig routing, HealthPolicy health, bool uses_registry,
                           std::function<Clock::time_point()> now)
    : routing_(routing),
      health_policy_(health),
      uses_registry_(uses_registry),
      now_(std::move(now)) {}

void ClusterState::SetMembers(std::vector<MemberInfo> members) {
  MutexLock lock(&mu_);
  std::map<std::string, Record> next;
  for (MemberInfo& m : members) {
    Counters& c = counters_[m.id];
    c.url = m.url;
    c.role = m.role;
    auto it = members_.find(m.id);
    if (it != members_.end() && it->second.info.url == m.url && it->second.info.role == m.role) {
      Record r = std::move(it->second);
      r.info = std::move(m);
      next.emplace(r.info.id, std::move(r));
      continue;
    }
    KVF_LOG_INFO("cluster: member {} joined ({} at {}, engine {}); probing it before routing to it",
                 m.id, MemberRoleName(m.role), m.url, m.engine_id);
    const std::string id = m.id;
    next.emplace(id, Record{std::move(m), MemberHealth(health_policy_)});
  }
  for (const auto& [id, r] : members_) {
    if (!next.contains(id)) {
      KVF_LOG_INFO("cluster: member {} ({} at {}) left the membership", id,
                   MemberRoleName(r.info.role), r.info.url);
    }
  }
  members_ = std::move(next);
}

void ClusterState::SetRegistryConnected(bool connected) {
  MutexLock lock(&mu_);
  if (registry_connected_ && !connected) ++registry_disconnects_;
  registry_connected_ = connected;
}

void ClusterState::CountRegistryEvent(std::string_view kind) {
  MutexLock lock(&mu_);
  ++registry_events_[std::string(kind)];
}

int64_t ClusterState::EstimateTokens(const RouteRequest& request) const {
  if (request.prompt_tokens >= 0) return request.prompt_tokens;
  if (request.prompt_token_ids >= 0) return request.prompt_token_ids;
  return std::llround(static_cast<double>(request.prompt_bytes) * tokens_per_byte_);
}

Candidate ClusterState::CandidateOf(Leg leg, const std::string& id, const Record& r) const {
  Candidate c;
  c.id = id;
  c.routable = r.health.routable();
  // The member's own figures include every proxy's requests but are up to a poll old; this
  // proxy's in-flight count is immediate but its own only. The larger is the better estimate.
  c.pending_prefill_tokens = r.inflight_prefill_tokens;
  c.num_seqs = r.inflight[LegIndex(Leg::kDecode)];
  if (r.load) {
    c.pending_prefill_tokens = std::max(c.pending_prefill_tokens, r.load->pending_prefill_tokens);
    c.num_seqs = std::max(c.num_seqs, r.load->running + r.load->waiting);
    c.free_kv_blocks = r.load->free_kv_blocks;
    c.total_kv_blocks = r.load->total_kv_blocks;
  }
  c.last_routed = r.last_routed[LegIndex(leg)];
  return c;
}

StatusOr<std::unique_ptr<Route>> ClusterState::Pick(Leg leg, const RouteRequest& request,
                                                    const std::vector<std::string>& exclude,
                                                    const std::string& avoid) {
  MutexLock lock(&mu_);
  const std::shared_ptr<const std::map<std::string, int64_t>> cached =
      request.holdings ? request.holdings() : nullptr;
  std::vector<const std::string*> ids;
  std::vector<Candidate> candidates;
  const EngineKind want = leg == Leg::kDecode ? EngineOf(avoid) : EngineKind::kUnknown;
  size_t other_engine = 0;
  for (const auto& [id, r] : members_) {
    if (!Serves(r.info.role, leg)) continue;
    if (want != EngineKind::kUnknown && r.engine != EngineKind::kUnknown && r.engine != want) {
      ++other_engine;
      continue;
    }
    Candidate c = CandidateOf(leg, id, r);
    c.excluded = std::find(exclude.begin(), exclude.end(), id) != exclude.end();
    c.avoid = id == avoid;
    if (cached) {
      auto held = cached->find(id);
      if (held != cached->end()) c.cached_tokens = held->second;
    }
    ids.push_back(&id);
    candidates.push_back(c);
  }
  const std::optional<Choice> choice =
      leg == Leg::kPrefill
          ? ChoosePrefill(request.affinity_key, candidates, routing_, request.prompt_tokens)
          : ChooseDecode(candidates, routing_);
  if (!choice) {
    return NoneToPick(leg, candidates.size(), other_engine, want, uses_registry_,
                      registry_connected_);
  }
  const std::string& id = *ids[choice->index];
  Record& r = members_.at(id);
  // The prefill work this leg adds: the prompt, less what the member holds of it (kv routing).
  int64_t tokens = leg == Leg::kPrefill ? EstimateTokens(request) : 0;
  if (tokens > 0 && cached) {
    auto held = cached->find(id);
    if (held != cached->end()) tokens -= std::clamp<int64_t>(held->second, 0, tokens);
  }
  if (request.on_pick) request.on_pick(id);
  ++r.inflight[LegIndex(leg)];
  r.last_routed[LegIndex(leg)] = ++route_seq_;
  r.inflight_prefill_tokens += tokens;
  ++counters_[id].routed[LegIndex(leg)];
  ++route_reasons_[std::string(LegName(leg)) + "/" +
                   (choice->routable ? std::string(RouteReasonName(choice->reason))
                                     : std::string("unhealthy"))];
  return std::unique_ptr<Route>(
      new Route(this, leg, id, r.info.url, tokens, choice->reason, choice->routable));
}

Status ClusterState::NoneToPick(Leg leg, size_t candidates, size_t other_engine, EngineKind want,
                                bool uses_registry, bool registry_connected) {
  const std::string leg_name(LegName(leg));
  if (candidates == 0 && other_engine > 0) {
    return UnavailableError(fmt::format(
        "no decode instance runs the prefill instance's engine ({}); {} decode instance(s) run "
        "another, whose connector cannot read its KV",
        EngineKindName(want), other_engine));
  }
  std::string why = candidates == 0 ? "no " + leg_name + " instance in the cluster"
                                    : "every " + leg_name + " instance failed this request";
  if (uses_registry && candidates == 0) {
    why += registry_connected ? " (none registered)" : " (the registry is unreachable)";
  }
  return UnavailableError(why);
}

EngineKind ClusterState::EngineOf(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? EngineKind::kUnknown : it->second.engine;
}

void ClusterState::Finish(const Route& route, Route::Outcome outcome) {
  MutexLock lock(&mu_);
  const int leg = LegIndex(route.leg());
  Counters& c = counters_[route.member_id()];
  if (outcome == Route::Outcome::kOk) ++c.ok[leg];
  if (outcome == Route::Outcome::kFailed) ++c.failed[leg];
  if (outcome == Route::Outcome::kNeutral) ++c.neutral[leg];
  auto it = members_.find(route.member_id());
  if (it == members_.end() || it->second.info.url != route.url()) return;  // gone meanwhile
  Record& r = it->second;
  --r.inflight[leg];
  r.inflight_prefill_tokens -= route.estimated_tokens_;
  if (outcome == Route::Outcome::kNeutral) return;
  if (r.health.OnRequest(outcome == Route::Outcome::kOk, now_())) {
    NoteEjected(route.member_id(), r,
                std::to_string(health_policy_.eject_after_failures) + " failed requests in a row");
  }
}

void ClusterState::NoteEjected(const std::string& id, const Record& r, std::string_view why) {
  ++counters_[id].ejections;
  KVF_LOG_WARN("cluster: member {} ({} at {}) ejected: {}; probing it again from {} ms", id,
               MemberRoleName(r.info.role), r.info.url, why, health_policy_.probe_backoff_min_ms);
}

void ClusterState::ObservePromptTokens(int64_t prompt_bytes, int64_t prompt_tokens) {
  if (prompt_bytes <= 0 || prompt_tokens <= 0) return;
  const double ratio = static_cast<double>(prompt_tokens) / static_cast<double>(prompt_bytes);
  MutexLock lock(&mu_);
  tokens_per_byte_ = tokens_per_byte_observed_ ? 0.9 * tokens_per_byte_ + 0.1 * ratio : ratio;
  tokens_per_byte_observed_ = true;
}

void ClusterState::CountRetry(Leg leg) {
  MutexLock lock(&mu_);
  ++retries_[LegIndex(leg)];
}

void ClusterState::CountStreamAborted() {
  MutexLock lock(&mu_);
  ++streams_aborted_;
}

void ClusterState::CountDecodeOnly() {
  MutexLock lock(&mu_);
  ++decode_only_;
}

uint64_t ClusterState::CountUpstreamAuthFailure(const std::string& upstream) {
  MutexLock lock(&mu_);
  return ++upstream_auth_failures_[upstream];
}

std::vector<ClusterState::PollTarget> ClusterState::PollTargets(Clock::time_point now) {
  MutexLock lock(&mu_);
  std::vector<PollTarget> out;
  for (const auto& [id, r] : members_) {
    if (r.health.ProbeDue(now)) out.push_back({id, r.info.url});
  }
  return out;
}

void ClusterState::OnPoll(const std::string& id, const std::string& url,
                          const StatusOr<MemberLoad>& load, Clock::time_point now) {
  MutexLock lock(&mu_);
  auto it = members_.find(id);
  if (it == members_.end() || it->second.info.url != url) return;
  Record& r = it->second;
  const MemberHealth::State before = r.health.state();
  if (load.ok()) {
    r.load = *load;
    if (load->engine != EngineKind::kUnknown && load->engine != r.engine) {
      KVF_LOG_INFO("cluster: member {} ({} at {}) runs {}", id, MemberRoleName(r.info.role), url,
                   EngineKindName(load->engine));
      r.engine = load->engine;
    }
    r.health.OnProbe(true, now);
    if (before != MemberHealth::State::kHealthy) {
      KVF_LOG_INFO("cluster: member {} ({} at {}) is {}; routing to it", id,
                   MemberRoleName(r.info.role), url,
                   before == MemberHealth::State::kJoining ? "up" : "back");
    }
    return;
  }
  r.load.reset();
  if (r.health.OnProbe(false, now)) {
    NoteEjected(id, r, load.status().ToString());
  } else if (before == MemberHealth::State::kJoining && r.health.ejections() == 0 &&
             !r.logged_unanswered) {
    r.logged_unanswered = true;
    KVF_LOG_WARN(
        "cluster: member {} ({} at {}) does not answer ({}); not routing to it until "
        "it does",
        id, MemberRoleName(r.info.role), url, load.status().ToString());
  }
}

std::vector<ClusterState::MemberView> ClusterState::Members() const {
  MutexLock lock(&mu_);
  std::vector<MemberView> out;
  for (const auto& [id, r] : members_) {
    const Counters& c = counters_.at(id);
    out.push_back(MemberView{r.info, r.health.state(), r.engine, r.load, r.inflight[0],
                             r.inflight[1], c.routed[0], c.routed[1]});
  }
  return out;
}

bool ClusterState::registry_connected() const {
  MutexLock lock(&mu_);
  return registry_connected_;
}

}  // namespace kvferry::cluster
