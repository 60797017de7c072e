#include "proxy/stream_relay.h"

#include <httplib.h>

#include "proxy/upstream_client.h"

namespace kvferry::proxy {

StreamRelay::StreamRelay(UpstreamUrl upstream, const UpstreamAccess& access, std::string path,
                         std::string request_id, std::string body, RelayTimeouts timeouts)
    : upstream_(std::move(upstream)), client_(MakeUpstreamClient(upstream_, access)) {
  client_->set_connection_timeout(std::chrono::milliseconds(timeouts.connect_timeout_ms));
  client_->set_read_timeout(std::chrono::milliseconds(timeouts.read_timeout_ms));
  client_->set_write_timeout(std::chrono::milliseconds(timeouts.connect_timeout_ms + 5000));
  client_->set_tcp_nodelay(true);
  thread_ = std::thread(
      [this, p = std::move(path), id = std::move(request_id), b = std::move(body)]() mutable {
        Run(std::move(p), std::move(id), std::move(b));
      });
}

StreamRelay::~StreamRelay() {
  Cancel();
  thread_.join();
}

void StreamRelay::Run(std::string path, std::string request_id, std::string body) {
  httplib::Request req;
  req.method = "POST";
  req.path = std::move(path);
  req.body = std::move(body);
  req.set_header("Content-Type", "application/json");
  if (!request_id.empty()) req.set_header("X-Request-Id", request_id);
  req.response_handler = [this](const httplib::Response& res) {
    MutexLock lock(&mu_);
    status_ = res.status;
    content_type_ = res.get_header_value("Content-Type");
    cv_.NotifyAll();
    return !cancelled_;
  };
  req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
    MutexLock lock(&mu_);
    if (cancelled_) return false;
    chunks_.emplace_back(data, n);
    cv_.NotifyAll();
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client_->send(req, res, err);
  MutexLock lock(&mu_);
  if (!ok && !cancelled_) {
    error_ = UpstreamError(upstream_.ToString(), static_cast<int>(err));
  }
  finished_ = true;
  cv_.NotifyAll();
}

StatusOr<int> StreamRelay::WaitStatus(Deadline deadline) {
  MutexLock lock(&mu_);
  if (!cv_.WaitUntil(&mu_, deadline.time_point(),
                     [this]() REQUIRES(mu_) { return status_ != 0 || finished_; })) {
    return DeadlineExceededError(upstream_.ToString() + ": no answer before the deadline");
  }
  if (status_ != 0) return status_;
  if (!error_.ok()) return error_;
  return UnavailableError(upstream_.ToString() + ": closed without an answer");
}

std::string StreamRelay::content_type() {
  MutexLock lock(&mu_);
  return content_type_;
}

StatusOr<std::optional<std::string>> StreamRelay::NextChunk(Deadline deadline) {
  MutexLock lock(&mu_);
  if (!cv_.WaitUntil(&mu_, deadline.time_point(),
                     [this]() REQUIRES(mu_) { return !chunks_.empty() || finished_; })) {
    return DeadlineExceededError(upstream_.ToString() + ": stream stalled past the deadline");
  }
  if (!chunks_.empty()) {
    std::string chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return std::optional<std::string>(std::move(chunk));
  }
  if (!error_.ok()) return error_;
  return std::optional<std::string>();
}

bool StreamRelay::WaitReady(Deadline deadline) {
  MutexLock lock(&mu_);
  return cv_.WaitUntil(&mu_, deadline.time_point(),
                       [this]() REQUIRES(mu_) { return !chunks_.empty() || finished_; });
}

StatusOr<std::string> StreamRelay::ReadAll(Deadline deadline) {
  std::string all;
  while (true) {
    KVF_ASSIGN_OR_RETURN(std::optional<std::string> chunk, NextChunk(deadline));
    if (!chunk) return all;
    all += *chunk;
  }
}

void StreamRelay::Cancel() {
  {
    MutexLock lock(&mu_);
    if (cancelled_ || finished_) {
      cancelled_ = true;
      return;
    }
    cancelled_ = true;
  }
  client_->stop();
}

}  // namespace kvferry::proxy
