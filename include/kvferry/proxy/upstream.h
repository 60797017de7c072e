// Upstream instances of the proxy: their URLs, and the one translation of an HTTP client failure
// into a Status. Which instance serves a request is the cluster's routing (kvferry/cluster).
//
// Thread-safety: values and pure functions.
#pragma once

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

// The Status for a failed call to `who` (e.g. "prefill instance http://h:p"): connection refused
// or reset -> Unavailable, connect/read timeout -> DeadlineExceeded, else Unavailable too.
// `httplib_error` is the integer value of httplib::Error.
Status UpstreamError(const std::string& who, int httplib_error);

}  // namespace kvferry::proxy
