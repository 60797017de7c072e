#include "kvferry/server/generation_service.h"

namespace kvferry::server {

void OutputChannel::Push(engine::RequestOutput output) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(output));
  }
  cv_.NotifyOne();
}

StatusOr<engine::RequestOutput> OutputChannel::Pop(Deadline deadline) {
  MutexLock lock(&mu_);
  if (!cv_.WaitUntil(&mu_, deadline.time_point(),
                     [this]() REQUIRES(mu_) { return !queue_.empty(); })) {
    return DeadlineExceededError("no output from the engine before the deadline");
  }
  engine::RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

}  // namespace kvferry::server
