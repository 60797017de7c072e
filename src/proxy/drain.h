// Drain (proxy-internal): the proxy's shutdown state on SIGTERM, as `kvferry serve` has its
// own (docs/serving.md, "kvferry proxy"). Begin() makes new generation requests and /health
// answer 503 (a load balancer moves on); requests already admitted run on, each holding a
// Ticket until its answer, streamed or not, is written; Cut() (the shutdown timeout passed)
// tells the streams still running to end at their next wait for D with an OpenAI error event
// and [DONE] instead of being cut off mid-body when the server stops.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kvferry/common/deadline.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::proxy {

class Drain {
 public:
  // One admitted request, in flight until destroyed.
  class Ticket {
   public:
    explicit Ticket(Drain* drain) : drain_(drain) {}
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    Drain* drain_;
  };

  // A ticket for a new request; null once draining (answer 503).
  std::shared_ptr<Ticket> Admit() EXCLUDES(mu_);
  void Begin() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  void Cut() { cut_.store(true); }
  bool cut() const { return cut_.load(); }
  int64_t in_flight() const EXCLUDES(mu_);
  // True once no request is in flight; false when `deadline` passed first.
  bool WaitIdle(const Deadline& deadline) EXCLUDES(mu_);

 private:
  std::atomic<bool> draining_{false};
  std::atomic<bool> cut_{false};
  mutable Mutex mu_;
  CondVar idle_;
  int64_t in_flight_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvferry::proxy
