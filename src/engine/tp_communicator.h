// TpCommunicator (internal): the all-reduce of the tensor-parallel ranks of one engine. The
// ranks are threads of one process (docs/engine.md, "Tensor parallelism": why threads), so the
// all-reduce is shared memory and a barrier: each rank publishes its partial sums, and after the
// barrier every rank adds the SAME fixed-order tree of all ranks' partials to its own copy of
// the residual stream — rank results combined as the top of the row-parallel tree
// (tensor_parallel.h): N = 2: p0 + p1; N = 4: (p0 + p1) + (p2 + p3). Every rank thus holds
// bit-identical activations, and the order never depends on which rank finished first.
//
// Partial buffers are owned here and alternate between two per rank, so a rank that runs ahead
// into the next all-reduce never overwrites a partial another rank is still reading: it cannot
// pass the next barrier before every rank has finished reading this one.
//
// Thread-safety: rank r's calls come from rank r's thread only; the ranks call concurrently.
// Every rank must make the same sequence of calls with the same n.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "kvferry/common/thread_annotations.h"

namespace kvferry::engine {

// A reusable barrier for a fixed number of threads: spins briefly, yielding (ranks usually
// arrive close together), then sleeps on a condition variable.
class RankBarrier {
 public:
  explicit RankBarrier(int32_t num_threads) : num_threads_(num_threads) {}
  // Returns once all threads have called it this round. Acquire/release: writes before a
  // thread's call are visible to every thread after the barrier.
  void ArriveAndWait();

 private:
  const int32_t num_threads_;
  std::atomic<int32_t> arrived_{0};
  std::atomic<uint64_t> round_{0};  // bumped under mu_ by the last thread to arrive
  Mutex mu_;
  CondVar cv_;
};

class TpCommunicator {
 public:
  explicit TpCommunicator(int32_t tp_size);
  TpCommunicator(const TpCommunicator&) = delete;
  TpCommunicator& operator=(const TpCommunicator&) = delete;

  int32_t tp_size() const { return tp_size_; }

  // The buffer of n floats that `rank` fills with its partial sums before its next
  // AllReduceAdd (valid until that call returns).
  float* PartialBuffer(int32_t rank, int64_t n);
  // Once every rank has called it: accumulate[i] += tree over ranks of their partials[i], for
  // i < n. With one rank, accumulate[i] += partial[i].
  void AllReduceAdd(int32_t rank, int64_t n, float* accumulate);

 private:
  struct Slot {
    std::vector<float> buffers[2];
    uint64_t calls = 0;  // AllReduceAdd calls of this rank so far: buffers[calls % 2] is next
  };
  const int32_t tp_size_;
  // slots_[r] is written by rank r only; read by every rank between two barriers.
  std::vector<Slot> slots_;
  RankBarrier barrier_;
};

}  // namespace kvferry::engine
