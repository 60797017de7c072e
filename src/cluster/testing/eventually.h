// Eventually: polls a condition until it holds or a deadline passes. Test-only, for the cluster
// tests that wait on another thread or process (etcd, a poller).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace kvferry::cluster::testing {

// Polls `pred` every 5 ms for up to `seconds`; true as soon as it holds, else its last answer.
inline bool Eventually(const std::function<bool()>& pred, int seconds = 15) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace kvferry::cluster::testing
