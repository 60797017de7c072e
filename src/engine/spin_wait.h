// SpinUntil: a short busy wait before a thread blocks on a condition variable (internal to the
// engine: the thread pool's hand-offs and the TP ranks' barrier).
//
// A decode step hands work to the pool's workers about a hundred times; waking a sleeping
// thread through the kernel costs more than many of those hand-offs' work. Spinning about 50 us
// first catches the next hand-off on a busy engine, and is short enough not to steal a core for
// long on an oversubscribed machine (every 8th turn yields to a thread that wants to run).
//
// Thread-safety: `done` is called from the spinning thread only; it must read shared state
// through atomics.
#pragma once

#include <thread>

namespace kvferry::engine {

inline constexpr int kSpinIterations = 2000;

// Returns true as soon as done() does, false after kSpinIterations turns.
template <typename Done>
bool SpinUntil(Done done) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done()) return true;
    if (i % 8 == 7) {
      std::this_thread::yield();
    } else {
      __builtin_ia32_pause();
    }
  }
  return done();
}

}  // namespace kvferry::engine
