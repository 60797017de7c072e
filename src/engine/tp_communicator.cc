#include "engine/tp_communicator.h"

#include <algorithm>
#include <chrono>

#include "engine/kernels/row_parallel.h"
#include "engine/spin_wait.h"

namespace kvferry::engine {

void RankBarrier::ArriveAndWait() {
  if (num_threads_ == 1) return;
  const uint64_t round = round_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == num_threads_) {
    arrived_.store(0, std::memory_order_relaxed);
    {
      MutexLock lock(&mu_);
      round_.store(round + 1, std::memory_order_release);
    }
    cv_.NotifyAll();
    return;
  }
  if (SpinUntil([&] { return round_.load(std::memory_order_acquire) != round; })) return;
  MutexLock lock(&mu_);
  // Timed waits in a loop (every wait has a deadline): a rank is only ever late, never gone —
  // the ranks are threads of this process, joined only when the engine is destroyed.
  while (round_.load(std::memory_order_acquire) == round) {
    cv_.WaitFor(&mu_, std::chrono::milliseconds(200),
                [&] { return round_.load(std::memory_order_acquire) != round; });
  }
}

TpCommunicator::TpCommunicator(int32_t tp_size)
    : tp_size_(tp_size), slots_(static_cast<size_t>(tp_size)), barrier_(tp_size) {}

float* TpCommunicator::PartialBuffer(int32_t rank, int64_t n) {
  Slot& s = slots_[rank];
  std::vector<float>& b = s.buffers[s.calls % 2];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

void TpCommunicator::AllReduceAdd(int32_t rank, int64_t n, float* accumulate) {
  const uint64_t call = slots_[rank].calls++;
  barrier_.ArriveAndWait();
  std::vector<const float*> parts;
  parts.reserve(slots_.size());
  for (const Slot& s : slots_) parts.push_back(s.buffers[call % 2].data());
  if (tp_size_ == 1) {
    for (int64_t i = 0; i < n; ++i) accumulate[i] += parts[0][i];
    return;
  }
  // The rank results combined as the top of the tree, then added to the residual: the same two
  // roundings as TP 1's (local tree, then +=).
  constexpr int64_t kBlock = 1024;
  float sum[kBlock];
  std::vector<const float*> at(parts.size());
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    for (size_t r = 0; r < parts.size(); ++r) at[r] = parts[r] + b;
    kernels::TreeSum(at, len, sum);
    for (int64_t i = 0; i < len; ++i) accumulate[b + i] += sum[i];
  }
}

}  // namespace kvferry::engine
