#include "kvferry/http/request_deadline.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <utility>
#include <vector>

#include "kvferry/common/tsan_ignore.h"
#include "kvferry/http/http_error.h"
#include "port_sockets.h"

namespace kvferry::http {
namespace {

// What a client whose request did not arrive in time reads before its connection closes.
std::string TimeoutResponse(std::chrono::milliseconds timeout) {
  const std::string body = OpenAiErrorBody(
      408, fmt::format("the request did not arrive within {} ms (--request-read-timeout)",
                       timeout.count()));
  return fmt::format(
      "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: "
      "{}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
}

}  // namespace

RequestDeadline::RequestDeadline(Options options) : options_(options) {}

RequestDeadline::~RequestDeadline() { Stop(); }

void RequestDeadline::Install(httplib::Server& http) {
  if (options_.timeout.count() <= 0) return;
  http.set_logger(
      [this](const httplib::Request& req, const httplib::Response&) { OnResponseWritten(req); });
}

httplib::Server::Handler RequestDeadline::Guard(httplib::Server::Handler handler) {
  if (options_.timeout.count() <= 0) return handler;
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    Arrived(req);
    handler(req, res);
  };
}

void RequestDeadline::Start(int port) {
  if (options_.timeout.count() <= 0 || thread_.joinable()) return;
  port_ = port;
  thread_ = std::thread([this] { Loop(); });
}

void RequestDeadline::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void RequestDeadline::Arrived(const httplib::Request& req) {
  MutexLock lock(&mu_);
  Conn& c = conns_[PeerKey(req.remote_addr, req.remote_port)];
  c.answering = true;
}

void RequestDeadline::OnResponseWritten(const httplib::Request& req) {
  MutexLock lock(&mu_);
  Conn& c = conns_[PeerKey(req.remote_addr, req.remote_port)];
  c.answering = false;
  c.since = Clock::now();
}

void RequestDeadline::Loop() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (cv_.WaitFor(&mu_, options_.scan_interval, [this]() REQUIRES(mu_) { return stopping_; })) {
        return;
      }
    }
    Scan(Clock::now());
  }
}

void RequestDeadline::Scan(Clock::time_point now) {
  std::vector<std::pair<int, std::string>> sockets;  // listed without the lock: syscalls
  ForEachSocketOnPort(port_, [&](int fd) {
    std::string key = PeerKey(fd);
    if (!key.empty()) sockets.emplace_back(fd, std::move(key));
  });
  std::vector<std::pair<int, std::string>> late;
  {
    MutexLock lock(&mu_);
    for (auto& [key, c] : conns_) c.seen = false;
    for (const auto& [fd, key] : sockets) {
      auto [it, fresh] = conns_.try_emplace(key);
      Conn& c = it->second;
      if (fresh) c.since = now;
      c.seen = true;
      if (!c.answering && !c.cut && now - c.since > options_.timeout) {
        late.emplace_back(fd, key);
        c.cut = true;  // once; its key goes when the socket does
      }
    }
    std::erase_if(conns_, [](const auto& kv) { return !kv.second.seen; });
  }
  for (const auto& [fd, key] : late) Cut(fd, key);
}

void RequestDeadline::Cut(int fd, const std::string& key) {
  // The descriptor may have closed since the scan and been reused by a new connection.
  if (PeerKey(fd) != key) return;
  // Counted before the peer can see the cut: a client that got its 408 (or saw the connection
  // close) and then reads the metric finds it counted.
  timed_out_total_.fetch_add(1);
  [[maybe_unused]] TsanIgnoreScope ignore;  // httplib's thread owns the descriptor (port_sockets.h)
  if (options_.plaintext) {
    const std::string response = TimeoutResponse(options_.timeout);
    (void)::send(fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(fd, SHUT_RDWR);  // httplib's read returns; it closes the descriptor
}

std::string RequestDeadlineMetricsText(const RequestDeadline& deadline) {
  return fmt::format(
      "# HELP kvferry:http_request_read_timeouts_total Connections cut because a request did "
      "not arrive whole within --request-read-timeout.\n"
      "# TYPE kvferry:http_request_read_timeouts_total counter\n"
      "kvferry:http_request_read_timeouts_total {}\n",
      deadline.timed_out_total());
}

}  // namespace kvferry::http
