// PrefixIndex: which blocks each member of a cluster holds, from its KV events, and how much of a
// prompt each one could serve from its prefix cache (docs/kv_events.md, "Routing by the index").
//
// A member is known by its id, its logical block size and the salt its chain hashes start from
// (kv::HashBlockTokens; both in its registry value). Blocks are keyed by chain hash: a block's
// hash covers every token before it, so "member m holds the first k blocks of a prompt" is k
// lookups of the prompt's own chain hashes, and a flat hash set per member is the radix tree.
//
// The index believes only what it can check. A BlockStored is applied only when its block_size is
// the member's and every hash in it is the chain hash of its tokens under the member's salt
// (from parent_block_hash on): another seed, another block size, a publisher that lies about
// which tokens a hash stands for — refused, counted by reason. A member that claims blocks it
// does not hold cannot be caught here; a route made on it costs a miss (the member computes), never
// a wrong answer. BlockRemoved of an unknown hash, and events of members the index does not know,
// are counted and ignored.
//
// Expected blocks: a router that just sent a prompt to a member knows the member will hold its
// blocks once it computed them, before any event says so. Expect() records them for
// `expect_ms`; MatchedTokens counts them as held until then, or until an event confirms them
// (stored) or the member clears. Without this, requests sharing a prefix that arrive together
// all look uncached and scatter.
//
// Not thread-safe: the owner serializes calls (the proxy holds it under a mutex).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvferry/kv_events/event_wire.h"

namespace kvferry::kv_events {

struct MemberKeys {
  int32_t block_size = 0;
  uint64_t salt = 0;
  friend bool operator==(const MemberKeys&, const MemberKeys&) = default;
};

// What Apply did with one batch.
struct ApplyCounts {
  int64_t stored_blocks = 0;
  int64_t removed_blocks = 0;
  int64_t cleared = 0;
  int64_t refused_block_size = 0;  // BlockStored events whose block_size is not the member's
  int64_t refused_hash = 0;        // BlockStored events with a hash that is not its tokens' chain
  int64_t unknown_removals = 0;    // hashes removed that the member never stored
  int64_t unknown_member = 0;      // events of a member the index does not know
};

class PrefixIndex {
 public:
  // Adds a member, or changes its keys (its blocks are dropped when they change).
  void SetMember(const std::string& id, MemberKeys keys);
  void RemoveMember(const std::string& id);
  bool HasMember(const std::string& id) const { return members_.count(id) != 0; }

  ApplyCounts Apply(const std::string& id, const EventBatch& batch);

  // `id` will hold the whole blocks of `tokens` (a request was just routed to it), until
  // now_ms + expect_ms at the latest. Unknown members are ignored.
  void Expect(const std::string& id, std::span<const int32_t> tokens, int64_t now_ms,
              int64_t expect_ms);

  // For every member: how many leading tokens of `tokens` it holds or is expected to hold at
  // now_ms (whole blocks only), hashing the prompt once per distinct MemberKeys. now_ms
  // kConfirmedOnly: the blocks its events confirmed only (every expectation has ended by then).
  static constexpr int64_t kConfirmedOnly = std::numeric_limits<int64_t>::max();
  std::map<std::string, int64_t> MatchedTokens(std::span<const int32_t> tokens,
                                               int64_t now_ms = 0) const;
  int64_t blocks(const std::string& id) const;

 private:
  struct Member {
    MemberKeys keys;
    std::unordered_map<uint64_t, int32_t> blocks;    // chain hash -> times stored
    std::unordered_map<uint64_t, int64_t> expected;  // chain hash -> until (ms)
  };
  static bool Verified(const BlockStored& e, uint64_t salt);
  // How many leading hashes of `chain` m holds or is expected to hold at now_ms.
  static int64_t HeldBlocks(const Member& m, const std::vector<uint64_t>& chain, int64_t now_ms);

  std::map<std::string, Member> members_;
};

}  // namespace kvferry::kv_events
