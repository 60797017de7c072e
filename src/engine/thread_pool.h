// ThreadPool: a fixed set of worker threads that run ParallelFor over an index range.
//
// Determinism: ParallelFor only splits *independent* outputs (rows, columns, heads) between
// threads; it never splits a reduction. Every kernel computes each output value the same way
// whichever thread computes it, so results do not depend on the thread count.
//
// Thread-safety: ParallelFor must be called from one thread at a time (the engine thread); the
// callback runs concurrently on the workers and the caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "kvferry/common/thread_annotations.h"

namespace kvferry::engine {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread: 1 means no worker threads.
  explicit ThreadPool(int32_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint sub-ranges covering [0, n), each a multiple of `grain`
  // long (except the last), and returns when all are done. Runs inline when n is small or the
  // pool has one thread.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(i) for every i in [0, num_threads()) at the same time, each on its own thread (0 on
  // the caller), and returns when all are done. For calls that wait for each other (the
  // tensor-parallel ranks meet in their all-reduce), which ParallelFor's sub-ranges must not do.
  void RunOnEach(const std::function<void(int32_t)>& fn);

 private:
  void WorkerLoop(int32_t worker_index);
  void RunShare(int32_t share_index);

  const int32_t num_threads_;
  std::vector<std::thread> workers_;

  // A job is published by bumping generation_ (under mu_, so that a sleeping worker cannot miss
  // it) and finished when pending_ reaches 0 (the last worker then takes mu_ before it notifies,
  // for the same reason). Both are atomics so that workers and the caller can first spin on them
  // (spin_wait.h) without the lock.
  Mutex mu_;
  CondVar work_cv_;
  CondVar done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int32_t> pending_{0};
  bool stop_ GUARDED_BY(mu_) = false;
  // The current job; written by the caller before generation_ is bumped, read by workers after.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
};

}  // namespace kvferry::engine
