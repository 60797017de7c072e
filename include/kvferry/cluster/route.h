// Route: one leg of one request placed on one member (docs/deploy.md, "Routing"), and what the
// proxy tells the cluster about it.
//
// While a Route lives, its member counts it in flight (the proxy's own, immediate view of the
// load, which the member's /metrics shows only at the next poll). Finish() records the outcome
// once: kOk and kFailed count per member, and kFailed toward ejecting it; kNeutral (the client
// went away, the request itself was bad) says nothing about the member. A Route destroyed
// without Finish() finishes kNeutral.
//
// Thread-safety: a Route is used by one thread at a time; it may outlive the member it names
// (not the Cluster that made it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kvferry/cluster/routing.h"

namespace kvferry::cluster {

enum class Leg : uint8_t { kPrefill, kDecode };
std::string_view LegName(Leg leg);  // "prefill", "decode"

// What routing needs to know about a request (the proxy derives it from the body).
struct RouteRequest {
  std::optional<uint64_t> affinity_key;  // prefill only
  int64_t prompt_bytes = 0;              // a text prompt's UTF-8 bytes
  int64_t prompt_token_ids = -1;         // a token-id prompt's length; -1: a text prompt
  // kv routing (routing.h): the prompt's length in tokens (-1: unknown). `holdings`, when set,
  // is called under the cluster's lock at each pick: for each member id, the leading prompt
  // tokens it holds then (a member not in the map: unknown); `on_pick` is told the member chosen.
  // So concurrent requests sharing a prefix see each other's picks (the first one's member counts
  // as holding it), never a snapshot taken before either was placed.
  int64_t prompt_tokens = -1;
  std::function<std::shared_ptr<const std::map<std::string, int64_t>>()> holdings;
  std::function<void(const std::string& member_id)> on_pick;
};

class ClusterState;

class Route {
 public:
  enum class Outcome : uint8_t { kOk, kFailed, kNeutral };

  ~Route();
  Route(const Route&) = delete;
  Route& operator=(const Route&) = delete;

  const std::string& member_id() const { return member_id_; }
  const std::string& url() const { return url_; }
  Leg leg() const { return leg_; }
  RouteReason reason() const { return reason_; }
  bool routable() const { return routable_; }  // false: chosen although unhealthy (none was)

  void Finish(Outcome outcome);

 private:
  friend class ClusterState;
  Route(ClusterState* state, Leg leg, std::string member_id, std::string url,
        int64_t estimated_tokens, RouteReason reason, bool routable)
      : state_(state),
        leg_(leg),
        member_id_(std::move(member_id)),
        url_(std::move(url)),
        estimated_tokens_(estimated_tokens),
        reason_(reason),
        routable_(routable) {}

  ClusterState* const state_;
  const Leg leg_;
  const std::string member_id_;
  const std::string url_;
  const int64_t estimated_tokens_;
  const RouteReason reason_;
  const bool routable_;
  bool finished_ = false;
};

}  // namespace kvferry::cluster
