#include "cluster/load_poller.h"

#include <httplib.h>

#include <algorithm>
#include <vector>

namespace kvferry::cluster {

StatusOr<std::string> FetchMetricsPlainHttp(const std::string& url, int64_t timeout_ms) {
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
  // Any answer proves the member alive; only a 200 carries figures (an instance without
  // /metrics, or one that wants a key for it, is routed by this proxy's own in-flight counts).
  return res->status == 200 ? std::move(res->body) : std::string();
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
      break;
    }
  }
  JoinFinishedReaders(/*all=*/true);
}

void LoadPoller::JoinFinishedReaders(bool all) {
  for (auto it = readers_.begin(); it != readers_.end();) {
    if (all || it->done->load()) {
      it->thread.join();
      it = readers_.erase(it);
    } else {
      ++it;
    }
  }
}

void LoadPoller::PollRound() {
  JoinFinishedReaders(/*all=*/false);
  for (const ClusterState::PollTarget& t : state_->PollTargets(ClusterState::Clock::now())) {
    const bool in_flight = std::any_of(readers_.begin(), readers_.end(),
                                       [&](const Reader& r) { return r.id == t.id; });
    if (in_flight) continue;
    auto done = std::make_shared<std::atomic<bool>>(false);
    readers_.push_back(
        Reader{t.id, done, std::thread([this, t, done] {
                 StatusOr<std::string> text = options_.fetch(t.url, options_.timeout_ms);
                 const StatusOr<MemberLoad> load =
                     text.ok() ? StatusOr<MemberLoad>(ParseMemberLoad(*text)) : text.status();
                 state_->OnPoll(t.id, t.url, load, ClusterState::Clock::now());
                 done->store(true);
               })});
  }
}

}  // namespace kvferry::cluster
