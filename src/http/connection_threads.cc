#include "kvferry/http/connection_threads.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "port_sockets.h"

namespace kvferry::http {
namespace {

constexpr auto kIdleExit = std::chrono::seconds(10);
constexpr size_t kKeepIdle = 4;
constexpr auto kShutdownGrace = std::chrono::seconds(1);

// Shuts down (both directions) every socket of this process whose local port is `port`: the
// connections a server accepted on it. A blocked read on one returns at once.
void ShutDownSocketsOnPort(int port) {
  ForEachSocketOnPort(port, [](int fd) { ::shutdown(fd, SHUT_RDWR); });
}

class Forwarding final : public httplib::TaskQueue {
 public:
  explicit Forwarding(std::shared_ptr<ConnectionThreads> to) : to_(std::move(to)) {}
  void enqueue(std::function<void()> fn) override { to_->enqueue(std::move(fn)); }
  void shutdown() override { to_->shutdown(); }

 private:
  std::shared_ptr<ConnectionThreads> to_;
};

}  // namespace

httplib::TaskQueue* ConnectionThreads::Handle(std::shared_ptr<ConnectionThreads> threads) {
  return new Forwarding(std::move(threads));
}

std::string ConnectionMetricsText(const ConnectionLoad& load) {
  return fmt::format(
      "# HELP kvferry:http_connections HTTP connections, served (open) or waiting for a thread "
      "past --max-connections.\n"
      "# TYPE kvferry:http_connections gauge\n"
      "kvferry:http_connections{{state=\"open\"}} {}\n"
      "kvferry:http_connections{{state=\"waiting\"}} {}\n"
      "# HELP kvferry:http_connections_waited_total Connections that waited for a thread.\n"
      "# TYPE kvferry:http_connections_waited_total counter\n"
      "kvferry:http_connections_waited_total {}\n",
      load.open, load.waiting, load.waited_total);
}

ConnectionThreads::ConnectionThreads(int max_connections)
    : max_threads_(static_cast<size_t>(std::max(max_connections, 1))) {}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::enqueue(std::function<void()> fn) {
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      JoinExitedLocked();
      queue_.push_back(std::move(fn));
      if (queue_.size() <= idle_) {
        cv_.NotifyOne();  // a parked thread takes it
      } else if (LiveThreadsLocked() < max_threads_) {
        threads_.emplace_back([this] { Run(); });
      } else {
        ++waited_total_;  // over the cap: the next thread to finish a connection takes it
      }
      return;
    }
  }
  fn();  // after shutdown (not httplib's order): run it rather than leak its socket
}

void ConnectionThreads::Run() {
  mu_.Lock();
  for (;;) {
    ++idle_;
    const bool woken = cv_.WaitFor(&mu_, kIdleExit,
                                   [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    --idle_;
    if (!queue_.empty()) {
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      mu_.Unlock();
      fn();
      fn = nullptr;  // the connection's state goes before the count says it closed
      mu_.Lock();
      --busy_;
      continue;
    }
    if (stopping_) break;
    if (!woken && LiveThreadsLocked() > kKeepIdle) {
      exited_.push_back(std::this_thread::get_id());
      break;
    }
  }
  mu_.Unlock();
}

void ConnectionThreads::JoinExitedLocked() {
  for (const std::thread::id id : exited_) {
    auto it = std::find_if(threads_.begin(), threads_.end(),
                           [id](const std::thread& t) { return t.get_id() == id; });
    if (it != threads_.end()) {
      it->join();  // it has left Run(): returns at once
      threads_.erase(it);
    }
  }
  exited_.clear();
}

void ConnectionThreads::shutdown() {
  std::list<std::thread> threads;
  int port = 0;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
    exited_.clear();
    port = listen_port_;
  }
  cv_.NotifyAll();
  const auto grace_end = std::chrono::steady_clock::now() + kShutdownGrace;
  while (port != 0 && std::chrono::steady_clock::now() < grace_end) {
    {
      MutexLock lock(&mu_);
      if (busy_ == 0 && queue_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (port != 0) ShutDownSocketsOnPort(port);
  for (std::thread& t : threads) t.join();  // each drains the queue before it returns
}

void ConnectionThreads::SetListenPort(int port) {
  MutexLock lock(&mu_);
  listen_port_ = port;
}

ConnectionLoad ConnectionThreads::load() const {
  MutexLock lock(&mu_);
  return {busy_, static_cast<int64_t>(queue_.size()), static_cast<int64_t>(LiveThreadsLocked()),
          waited_total_};
}

}  // namespace kvferry::http
