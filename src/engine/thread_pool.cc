#include "engine/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "engine/spin_wait.h"

namespace kvferry::engine {

ThreadPool::ThreadPool(int32_t num_threads) : num_threads_(std::max<int32_t>(1, num_threads)) {
  for (int32_t i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunShare(int32_t share_index) {
  // Share i gets chunks [i*chunks/T, (i+1)*chunks/T) of grain-sized chunks.
  const int64_t chunks = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t c0 = chunks * share_index / num_threads_;
  const int64_t c1 = chunks * (share_index + 1) / num_threads_;
  const int64_t begin = c0 * job_grain_;
  const int64_t end = std::min(job_n_, c1 * job_grain_);
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::WorkerLoop(int32_t worker_index) {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      MutexLock lock(&mu_);
      // Timed wait in a loop: every wait has a deadline; an idle worker just waits again.
      while (!stop_ && generation_.load(std::memory_order_acquire) == seen) {
        work_cv_.WaitFor(&mu_, std::chrono::milliseconds(200), [&]() REQUIRES(mu_) {
          return stop_ || generation_.load(std::memory_order_acquire) != seen;
        });
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
    }
    RunShare(worker_index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      { MutexLock lock(&mu_); }  // the caller is now waiting or has not yet looked
      done_cv_.NotifyAll();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.NotifyAll();
  RunShare(0);
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (SpinUntil(finished)) return;
  MutexLock lock(&mu_);
  while (!finished()) done_cv_.WaitFor(&mu_, std::chrono::milliseconds(200), finished);
}

void ThreadPool::RunOnEach(const std::function<void(int32_t)>& fn) {
  // n == num_threads_ and grain 1: share i is exactly index i (RunShare), and every share runs
  // on its own thread, all at once.
  ParallelFor(num_threads_, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(static_cast<int32_t>(i));
  });
}

}  // namespace kvferry::engine
