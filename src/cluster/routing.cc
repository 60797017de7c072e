#include "kvferry/cluster/routing.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace kvferry::cluster {

namespace {

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// splitmix64's finalizer: spreads a combination of two hashes over all 64 bits.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The members the policy may choose from, best class first: routable and not avoided, then
// routable, then any not excluded that is not avoided, then any not excluded.
std::vector<size_t> Eligible(std::span<const Candidate> members) {
  const auto pick = [&](bool need_routable, bool need_not_avoided) {
    std::vector<size_t> out;
    for (size_t i = 0; i < members.size(); ++i) {
      const Candidate& m = members[i];
      if (m.excluded || (need_routable && !m.routable) || (need_not_avoided && m.avoid)) continue;
      out.push_back(i);
    }
    return out;
  };
  for (const auto& [routable, not_avoided] :
       {std::pair{true, true}, {true, false}, {false, true}, {false, false}}) {
    std::vector<size_t> out = pick(routable, not_avoided);
    if (!out.empty()) return out;
  }
  return {};
}

template <typename Key>
size_t MinBy(std::span<const Candidate> members, const std::vector<size_t>& among, Key key) {
  return *std::min_element(among.begin(), among.end(),
                           [&](size_t a, size_t b) { return key(members[a]) < key(members[b]); });
}

Choice Chosen(std::span<const Candidate> members, size_t index, RouteReason reason) {
  return Choice{index, reason, members[index].routable};
}

Choice LeastRecent(std::span<const Candidate> members, const std::vector<size_t>& among) {
  const size_t i =
      MinBy(members, among, [](const Candidate& m) { return std::tuple(m.last_routed, m.id); });
  return Chosen(members, i, RouteReason::kRoundRobin);
}

bool AnyHoldingsKnown(std::span<const Candidate> members) {
  return std::any_of(members.begin(), members.end(),
                     [](const Candidate& m) { return m.cached_tokens >= 0; });
}

}  // namespace

std::string_view RouteReasonName(RouteReason r) {
  switch (r) {
    case RouteReason::kLeastLoaded:
      return "least_loaded";
    case RouteReason::kAffinity:
      return "affinity";
    case RouteReason::kAffinityOverloaded:
      return "affinity_overloaded";
    case RouteReason::kKvHit:
      return "kv_hit";
    case RouteReason::kKvMiss:
      return "kv_miss";
    case RouteReason::kRoundRobin:
      return "round_robin";
  }
  return "least_loaded";
}

std::string_view RoutingModeName(RoutingMode mode) {
  switch (mode) {
    case RoutingMode::kKv:
      return "kv";
    case RoutingMode::kAffinity:
      return "affinity";
    case RoutingMode::kLeastLoaded:
      return "least-loaded";
    case RoutingMode::kRoundRobin:
      return "round-robin";
  }
  return "affinity";
}

StatusOr<RoutingMode> ParseRoutingMode(std::string_view name) {
  for (RoutingMode m : {RoutingMode::kKv, RoutingMode::kAffinity, RoutingMode::kLeastLoaded,
                        RoutingMode::kRoundRobin}) {
    if (name == RoutingModeName(m)) return m;
  }
  return InvalidArgumentError("routing mode '" + std::string(name) +
                              "' is not one of kv, affinity, least-loaded, round-robin");
}

namespace {

bool CanLoad(const MemberInfo& m) { return m.kv_role == "kv_both"; }
bool CanLend(const MemberInfo& m) { return m.kv_role == "kv_producer" || m.kv_role == "kv_both"; }

int64_t HeldBy(const std::map<std::string, int64_t>& held, const std::string& id) {
  auto it = held.find(id);
  return it == held.end() ? 0 : std::max<int64_t>(it->second, 0);
}

}  // namespace

std::optional<PrefixSource> ChoosePrefixSource(const MemberInfo& p,
                                               const std::map<std::string, int64_t>& held,
                                               std::span<const MemberInfo> members,
                                               int64_t prompt_tokens, int64_t min_tokens) {
  if (!CanLoad(p) || min_tokens <= 0) return std::nullopt;
  const int64_t own = HeldBy(held, p.id);
  std::optional<PrefixSource> best;
  for (const MemberInfo& m : members) {
    if (m.id == p.id || !CanLend(m) || m.block_size <= 0) continue;
    // Whole blocks, and never the prompt's last token (the source computes one past them).
    const int64_t limit = (prompt_tokens - 1) / m.block_size * m.block_size;
    const int64_t tokens = std::min(HeldBy(held, m.id), limit) / m.block_size * m.block_size;
    if (tokens - own < min_tokens || (best && best->tokens >= tokens)) continue;
    best = PrefixSource{m.id, m.url, tokens, m.block_size};
  }
  return best;
}

uint64_t RendezvousWeight(uint64_t key, std::string_view member_id) {
  return Mix(key ^ Mix(Fnv1a(member_id)));
}

std::optional<Choice> ChoosePrefill(std::optional<uint64_t> affinity_key,
                                    std::span<const Candidate> members, const RoutingConfig& config,
                                    int64_t prompt_tokens) {
  const std::vector<size_t> eligible = Eligible(members);
  if (eligible.empty()) return std::nullopt;
  if (config.mode == RoutingMode::kRoundRobin) return LeastRecent(members, eligible);
  if (config.mode == RoutingMode::kKv && prompt_tokens >= 0 && AnyHoldingsKnown(members)) {
    const size_t best = MinBy(members, eligible, [&](const Candidate& m) {
      const int64_t uncached =
          prompt_tokens - std::clamp<int64_t>(m.cached_tokens, 0, prompt_tokens);
      return std::tuple(uncached + m.pending_prefill_tokens, m.last_routed, m.id);
    });
    return Chosen(members, best,
                  members[best].cached_tokens > 0 ? RouteReason::kKvHit : RouteReason::kKvMiss);
  }
  const size_t least = MinBy(members, eligible, [](const Candidate& m) {
    return std::tuple(m.pending_prefill_tokens, m.last_routed, m.id);
  });
  if (!affinity_key || config.mode == RoutingMode::kLeastLoaded) {
    return Chosen(members, least, RouteReason::kLeastLoaded);
  }
  const size_t home = *std::max_element(eligible.begin(), eligible.end(), [&](size_t a, size_t b) {
    return RendezvousWeight(*affinity_key, members[a].id) <
           RendezvousWeight(*affinity_key, members[b].id);
  });
  const int64_t excess =
      members[home].pending_prefill_tokens - members[least].pending_prefill_tokens;
  if (excess > config.affinity_max_imbalance_tokens) {
    return Chosen(members, least, RouteReason::kAffinityOverloaded);
  }
  return Chosen(members, home, RouteReason::kAffinity);
}

std::optional<Choice> ChooseDecode(std::span<const Candidate> members,
                                   const RoutingConfig& config) {
  const std::vector<size_t> eligible = Eligible(members);
  if (eligible.empty()) return std::nullopt;
  std::vector<size_t> roomy;
  for (size_t i : eligible) {
    const Candidate& m = members[i];
    if (m.total_kv_blocks <= 0 ||
        static_cast<double>(m.free_kv_blocks) >=
            config.min_free_kv_fraction * static_cast<double>(m.total_kv_blocks)) {
      roomy.push_back(i);
    }
  }
  const std::vector<size_t>& among = roomy.empty() ? eligible : roomy;
  if (config.mode == RoutingMode::kRoundRobin) return LeastRecent(members, among);
  const bool kv = config.mode == RoutingMode::kKv;
  const size_t best = MinBy(members, among, [kv](const Candidate& m) {
    return std::tuple(m.num_seqs, kv ? -m.cached_tokens : 0, -m.free_kv_blocks, m.last_routed,
                      m.id);
  });
  if (kv && members[best].cached_tokens > 0) return Chosen(members, best, RouteReason::kKvHit);
  return Chosen(members, best, RouteReason::kLeastLoaded);
}

}  // namespace kvferry::cluster
