// MemberHealth: whether the proxy may route to one member, as a small state machine over the
// outcomes it observes. Time is passed in, so the machine is tested without clocks or sleeps.
//
//   joining --probe ok--> healthy --probe failed, or `eject_after_failures` failed requests in a
//   row--> ejected --probe ok--> healthy
//
// A new member is probed (its /metrics read) before it gets traffic. A member that fails a probe
// (ejected, or joining and not answering) is probed again after `probe_backoff_min_ms`, doubling
// up to `probe_backoff_max_ms` while it keeps failing; a healthy one is polled every round (the
// poll reads its load).
//
// Thread-safety: a value; the owner (ClusterState) serialises access.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace kvferry::cluster {

struct HealthPolicy {
  int32_t eject_after_failures = 2;  // failed requests in a row
  int64_t probe_backoff_min_ms = 500;
  int64_t probe_backoff_max_ms = 5000;
};

class MemberHealth {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State : uint8_t { kJoining, kHealthy, kEjected };

  explicit MemberHealth(HealthPolicy policy) : policy_(policy) {}

  State state() const { return state_; }
  bool routable() const { return state_ == State::kHealthy; }
  bool ProbeDue(Clock::time_point now) const;
  int64_t ejections() const { return ejections_; }

  // Each returns true when the call ejected the member (for the log line and the counter).
  bool OnProbe(bool ok, Clock::time_point now);
  bool OnRequest(bool ok, Clock::time_point now);

 private:
  void BackOff(Clock::time_point now);
  bool Eject(Clock::time_point now);

  HealthPolicy policy_;
  State state_ = State::kJoining;
  int32_t failures_in_a_row_ = 0;
  int64_t backoff_ms_ = 0;
  Clock::time_point next_probe_{};
  int64_t ejections_ = 0;
};

std::string_view HealthStateName(MemberHealth::State s);  // "joining", "healthy", "ejected"

}  // namespace kvferry::cluster
