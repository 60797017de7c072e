// The proxy's routing policy: which prefill (P) and which decode (D) instance serve a request,
// as pure functions of the request's features and the members' loads (docs/deploy.md,
// "Routing"). No clock, no I/O, no state: every proxy given the same inputs picks the same
// member, so several proxies can run side by side without sharing anything.
//
// The policy is one of four modes (RoutingConfig::mode, `kvferry proxy --routing`):
//
// kv: by what each member already holds of the prompt (Candidate::cached_tokens, from its KV
//    events; docs/kv_events.md). P: the least cost, where a member's cost is the prompt tokens it
//    would compute (prompt_tokens - cached_tokens) plus its pending prefill tokens — a cached
//    prefix is work not done, and a queue is work waiting. D: fewest sequences as below, then the
//    most cached tokens (a D holding the prefix pulls only the rest). When the prompt's tokens or
//    every member's holdings are unknown (no member publishes events, a prompt that could not be
//    tokenized), kv routes as affinity.
// affinity (below): P by prefix affinity within a load bound, D by load.
// least-loaded: P by pending prefill tokens alone, D by load.
// round-robin: each leg to the member routed to least recently, whatever its load.
//
// affinity, P: least pending prefill tokens, with prefix affinity. A request whose prompt starts
// with at
//    least `affinity_prefix` units (bytes of text, or token ids) has an affinity key, a hash of
//    those units; the key picks one P by rendezvous hashing (the highest hash of key and member
//    id), so prompts with the same leading blocks reach the same P and hit its prefix cache, and
//    a member leaving moves only its own keys. The affinity P is skipped for the least-loaded one
//    when it has more than `affinity_max_imbalance_tokens` pending tokens beyond it.
// D: fewest sequences (running + waiting), among members with at least
//    `min_free_kv_fraction` of their KV blocks free (all members if none has); ties go to the
//    most free blocks.
// Ties after that go to the member this proxy routed to least recently (`last_routed`: a
// sequence number, 0 for never), then by id — idle members take turns, and one that just joined
// takes one turn, not every request until its count caught up.
// Members `excluded` (already tried for this request) are never chosen; members not `routable`
// (joining, ejected) only when no routable one is left, so a cluster whose health checks all
// fail still answers with the members' real errors rather than none; `avoid` (the instance
// already serving the request's other leg) only when nothing else is left.
//
// Prefix pulls (docs/deploy.md, "Prefix pulls"): ChoosePrefixSource picks the member a P
// should pull the prompt's prefix from — the one holding the most leading tokens of it (whole
// blocks, never the prompt's last token) among the members that can lend KV (kv_role
// kv_producer or kv_both, not P), when that is at least `min_tokens` more than P holds and P can
// load (kv_role kv_both).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvferry/cluster/member.h"
#include "kvferry/common/status.h"

namespace kvferry::cluster {

enum class RoutingMode : uint8_t { kKv, kAffinity, kLeastLoaded, kRoundRobin };
std::string_view RoutingModeName(RoutingMode mode);  // "kv", "affinity", ...
// "kv", "affinity", "least-loaded", "round-robin"; InvalidArgument naming them otherwise.
StatusOr<RoutingMode> ParseRoutingMode(std::string_view name);

struct RoutingConfig {
  RoutingMode mode = RoutingMode::kAffinity;
  int32_t affinity_prefix = 128;
  int64_t affinity_max_imbalance_tokens = 2048;
  double min_free_kv_fraction = 0.05;
};

struct Candidate {
  std::string_view id;
  bool routable = true;
  bool excluded = false;
  bool avoid = false;
  int64_t pending_prefill_tokens = 0;
  int32_t num_seqs = 0;
  int64_t free_kv_blocks = 0;
  int64_t total_kv_blocks = 0;  // 0: unknown (no KV filter)
  int64_t cached_tokens = -1;   // leading prompt tokens it holds (kv mode); -1: unknown
  uint64_t last_routed = 0;
};

enum class RouteReason : uint8_t {
  kLeastLoaded,         // no affinity key (or D)
  kAffinity,            // the key's member
  kAffinityOverloaded,  // the key's member had too many pending tokens: least loaded instead
  kKvHit,               // kv: the least cost, on a member holding part of the prompt
  kKvMiss,              // kv: the least cost, on a member holding none of it
  kRoundRobin,          // routed to least recently
};
std::string_view RouteReasonName(RouteReason r);  // "least_loaded", "affinity", ...

struct Choice {
  size_t index = 0;
  RouteReason reason = RouteReason::kLeastLoaded;
  bool routable = true;  // false: no routable member was left, an unhealthy one was chosen
};

// `prompt_tokens`: the prompt's length in tokens when known (kv mode), else -1.
std::optional<Choice> ChoosePrefill(std::optional<uint64_t> affinity_key,
                                    std::span<const Candidate> members, const RoutingConfig& config,
                                    int64_t prompt_tokens = -1);
std::optional<Choice> ChooseDecode(std::span<const Candidate> members, const RoutingConfig& config);

struct PrefixSource {
  std::string member_id;
  std::string url;
  int64_t tokens = 0;      // leading prompt tokens it lends: whole blocks of its block size
  int32_t block_size = 0;  // its logical block size
};

// `held`: leading prompt tokens each member holds (by its KV events); `prompt_tokens`: the
// prompt's length; `members`: those that may serve (P among them).
std::optional<PrefixSource> ChoosePrefixSource(const MemberInfo& p,
                                               const std::map<std::string, int64_t>& held,
                                               std::span<const MemberInfo> members,
                                               int64_t prompt_tokens, int64_t min_tokens);

// The rendezvous weight of `member_id` for `key` (64-bit mix of the key and FNV-1a of the id).
uint64_t RendezvousWeight(uint64_t key, std::string_view member_id);

}  // namespace kvferry::cluster
