#include "cluster/load_poller.h"

#include <httplib.h>

#include <vector>

namespace kvferry::cluster {

StatusOr<MemberLoad> PollMember(const std::string& url, int64_t timeout_ms) {
  httplib::Client c(url);
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  c.set_write_timeout(timeout);
  auto res = c.Get("/metrics");
  if (!res) {
    const std::string what = url + "/metrics: " + httplib::to_string(res.error());
    return res.error() == httplib::Error::ConnectionTimeout || res.error() == httplib::Error::Read
               ? DeadlineExceededError(what)
               : UnavailableError(what);
  }
  if (res->status != 200) {
    return UnavailableError(url + "/metrics answered HTTP " + std::to_string(res->status));
  }
  return ParseMemberLoad(res->body);
}

std::unique_ptr<LoadPoller> LoadPoller::Start(LoadPollerOptions options, ClusterState* state) {
  std::unique_ptr<LoadPoller> p(new LoadPoller(options, state));
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

LoadPoller::~LoadPoller() { Stop(); }

void LoadPoller::Stop() {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    cv_.NotifyAll();
  }
  thread_.join();
}

void LoadPoller::Run() {
  while (true) {
    PollRound();
    MutexLock lock(&mu_);
    if (cv_.WaitFor(&mu_, std::chrono::milliseconds(options_.interval_ms),
                    [this]() REQUIRES(mu_) { return stop_; })) {
      return;
    }
  }
}

void LoadPoller::PollRound() {
  const std::vector<ClusterState::PollTarget> targets =
      state_->PollTargets(ClusterState::Clock::now());
  std::vector<std::thread> readers;
  readers.reserve(targets.size());
  for (const ClusterState::PollTarget& t : targets) {
    readers.emplace_back([this, t] {
      const StatusOr<MemberLoad> load = PollMember(t.url, options_.timeout_ms);
      state_->OnPoll(t.id, t.url, load, ClusterState::Clock::now());
    });
  }
  for (std::thread& r : readers) r.join();
}

}  // namespace kvferry::cluster
