// Upstream instances of the proxy: their URLs, round-robin choice among them, and the one
// translation of an HTTP client failure into a Status.
//
// Thread-safety: UpstreamUrl is a value; RoundRobin::Next may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::proxy {

struct UpstreamUrl {
  std::string host;
  int port = 0;
  bool https = false;
  std::string ToString() const {
    return (https ? "https://" : "http://") + host + ":" + std::to_string(port);
  }
};

// "http://host:port", "https://host:port" (TLS, the certificate checked against
// UpstreamAccess::ca_file), either with a trailing '/', or "host:port" (http). InvalidArgument
// otherwise.
StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url);

// How the proxy reaches its upstreams (docs/deploy.md): its own API key toward P and D (never
// the client's), and the CA bundle that https upstreams' certificates must chain to (empty: the
// system's CAs).
struct UpstreamAccess {
  std::string api_key;
  std::string ca_file;
};

class RoundRobin {
 public:
  explicit RoundRobin(std::vector<UpstreamUrl> upstreams) : upstreams_(std::move(upstreams)) {}
  // Precondition: at least one upstream.
  const UpstreamUrl& Next() {
    return upstreams_[next_.fetch_add(1, std::memory_order_relaxed) % upstreams_.size()];
  }
  size_t size() const { return upstreams_.size(); }

 private:
  const std::vector<UpstreamUrl> upstreams_;
  std::atomic<uint64_t> next_{0};
};

// The Status for a failed call to `who` (e.g. "prefill instance http://h:p"): connection refused
// or reset -> Unavailable, connect/read timeout -> DeadlineExceeded, else Unavailable too.
// `httplib_error` is the integer value of httplib::Error.
Status UpstreamError(const std::string& who, int httplib_error);

}  // namespace kvferry::proxy
