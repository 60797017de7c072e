#include "proxy/drain.h"

#include <algorithm>
#include <chrono>

namespace kvferry::proxy {

Drain::Ticket::~Ticket() {
  MutexLock lock(&drain_->mu_);
  if (--drain_->in_flight_ == 0) drain_->idle_.NotifyAll();
}

std::shared_ptr<Drain::Ticket> Drain::Admit() {
  MutexLock lock(&mu_);
  if (draining_.load()) return nullptr;  // under mu_: WaitIdle never misses one admitted
  ++in_flight_;
  return std::make_shared<Ticket>(this);
}

int64_t Drain::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

bool Drain::WaitIdle(const Deadline& deadline) {
  MutexLock lock(&mu_);
  while (in_flight_ > 0) {
    const int64_t ms = std::clamp<int64_t>(deadline.RemainingMs(), 0, 200);
    if (ms == 0) return false;
    idle_.WaitFor(&mu_, std::chrono::milliseconds(ms),
                  [this]() REQUIRES(mu_) { return in_flight_ == 0; });
  }
  return true;
}

}  // namespace kvferry::proxy
