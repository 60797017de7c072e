#include "cluster/member_health.h"

#include <algorithm>

namespace kvferry::cluster {

bool MemberHealth::ProbeDue(Clock::time_point now) const {
  return state_ == State::kHealthy || now >= next_probe_;
}

void MemberHealth::BackOff(Clock::time_point now) {
  backoff_ms_ = backoff_ms_ == 0 ? policy_.probe_backoff_min_ms
                                 : std::min(backoff_ms_ * 2, policy_.probe_backoff_max_ms);
  next_probe_ = now + std::chrono::milliseconds(backoff_ms_);
}

bool MemberHealth::Eject(Clock::time_point now) {
  const bool newly = state_ != State::kEjected;
  if (newly) backoff_ms_ = 0;
  BackOff(now);
  state_ = State::kEjected;
  failures_in_a_row_ = 0;
  if (newly) ++ejections_;
  return newly;
}

bool MemberHealth::OnProbe(bool ok, Clock::time_point now) {
  if (ok) {
    state_ = State::kHealthy;
    failures_in_a_row_ = 0;
    backoff_ms_ = 0;
    return false;
  }
  // A member that never answered stays joining (no traffic): it was never in, so there is
  // nothing to eject; it is probed again with the same backoff as an ejected one.
  if (state_ == State::kJoining) {
    BackOff(now);
    return false;
  }
  return Eject(now);
}

bool MemberHealth::OnRequest(bool ok, Clock::time_point now) {
  if (ok) {
    failures_in_a_row_ = 0;
    return false;
  }
  if (state_ != State::kHealthy) return false;
  return ++failures_in_a_row_ >= policy_.eject_after_failures && Eject(now);
}

std::string_view HealthStateName(MemberHealth::State s) {
  switch (s) {
    case MemberHealth::State::kJoining:
      return "joining";
    case MemberHealth::State::kHealthy:
      return "healthy";
    case MemberHealth::State::kEjected:
      return "ejected";
  }
  return "joining";
}

}  // namespace kvferry::cluster
