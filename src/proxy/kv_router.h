// KvRouter (proxy-internal): the proxy's view of where KV lives, for `--routing kv`
// (docs/kv_events.md, "Routing by the index").
//
// For every member whose registry value names a KV-event endpoint (cluster/member.h), one
// thread subscribes to its events (kv_events::Subscriber: order, replays, restarts) and applies
// them to a PrefixIndex keyed by the member's block size and hash salt; a member that leaves, or
// comes back with another endpoint or salt, is dropped first. Per request, Tokenize() asks a
// member's /tokenize for the prompt's token ids (the same tokenizer and chat template the
// member will use), and Holdings() says, per member, how many leading tokens of them it holds.
//
// Counts (RenderMetrics): events applied and refused per member and reason, blocks held,
// subscriber gaps/replays/restarts, tokenize failures, and predicted against actual prefix hits
// of the prefill legs (P's usage.prompt_tokens_details.cached_tokens; P recomputes a prompt's
// last token, so a whole-block prompt reports one token less than its blocks hold).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/cluster/member.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/kv_events/prefix_index.h"
#include "kvferry/proxy/upstream.h"

namespace kvferry::proxy {

class KvRouter {
 public:
  KvRouter(UpstreamAccess upstream, int64_t tokenize_timeout_ms);
  ~KvRouter();  // stops every subscriber thread
  KvRouter(const KvRouter&) = delete;
  KvRouter& operator=(const KvRouter&) = delete;

  // Follows the membership: subscribes to new members with events, drops those gone or changed.
  void SyncMembers(const std::vector<cluster::MemberInfo>& members);
  // Whether some member publishes events (otherwise kv routing has nothing to go by).
  bool active() const;

  // POST <a member with events>/tokenize with the client's body: the prompt's ids, or an error
  // (the request is then routed without the index). Members take turns.
  StatusOr<std::vector<int32_t>> Tokenize(const std::string& client_body);
  std::shared_ptr<const std::map<std::string, int64_t>> Holdings(
      std::span<const int32_t> tokens) const;
  // The same, counting only blocks the members' events confirmed (no expected ones): what a
  // member can lend now.
  std::map<std::string, int64_t> ConfirmedHoldings(std::span<const int32_t> tokens) const;
  // A leg of a prompt was just sent to `member`: it will hold the prompt's blocks (expected for
  // kExpectMs, or until its events confirm them; PrefixIndex::Expect).
  void NoteRouted(const std::string& member, std::span<const int32_t> tokens);
  static constexpr int64_t kExpectMs = 15000;

  // A prefill leg's outcome: the tokens the index said its member held, and the cached tokens
  // its answer reported (nullopt: not reported).
  void CountPrediction(int64_t predicted, std::optional<int64_t> actual);
  std::string RenderMetrics() const;

 private:
  struct Follower;  // one member's subscriber thread
  struct Counters {
    int64_t stored = 0, removed = 0, cleared = 0, refused_block_size = 0, refused_hash = 0,
            unknown_removals = 0, garbage = 0, gaps = 0, replays = 0, restarts = 0;
  };
  void Follow(Follower* f);

  const UpstreamAccess upstream_;
  const int64_t tokenize_timeout_ms_;
  mutable Mutex mu_;
  kv_events::PrefixIndex index_ GUARDED_BY(mu_);
  std::map<std::string, Counters> counters_ GUARDED_BY(mu_);  // kept after a member leaves
  std::vector<std::string> urls_ GUARDED_BY(mu_);             // members with events
  std::map<std::string, std::unique_ptr<Follower>> followers_ GUARDED_BY(mu_);
  std::atomic<uint64_t> next_tokenizer_{0};
  std::atomic<int64_t> tokenize_failures_{0};
  std::atomic<int64_t> predicted_tokens_{0}, actual_tokens_{0}, predictions_{0},
      predictions_missed_{0};
};

}  // namespace kvferry::proxy
