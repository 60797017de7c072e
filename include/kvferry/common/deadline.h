// Deadline: a point on the steady clock after which a wait gives up. Every wait in kvferry
// takes one (or a timeout_ms that becomes one).
//
// Thread-safety: a value.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvferry {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline AfterMs(int64_t timeout_ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(timeout_ms));
  }
  static Deadline At(Clock::time_point tp) { return Deadline(tp); }

  Clock::time_point time_point() const { return tp_; }
  bool Expired() const { return Clock::now() >= tp_; }
  // Milliseconds left, never negative.
  int64_t RemainingMs() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(tp_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }

 private:
  explicit Deadline(Clock::time_point tp) : tp_(tp) {}
  Clock::time_point tp_;
};

// Milliseconds on the steady clock (the one Deadline uses): for intervals, never for dates.
inline int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             Deadline::Clock::now().time_since_epoch())
      .count();
}

}  // namespace kvferry
