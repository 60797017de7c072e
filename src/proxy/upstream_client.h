// MakeUpstreamClient (proxy-internal): the one place an httplib client toward P or D is made,
// so every leg gets the same TLS verification and API key.
//
// Thread-safety: a free function; each client is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/proxy/upstream.h"

namespace httplib {
class Client;
}

namespace kvferry::proxy {

// A client for `url`: TLS with the server's certificate verified (against access.ca_file, or
// the system's CAs) when url.https, and `Authorization: Bearer access.api_key` on every request
// when the key is set.
std::unique_ptr<httplib::Client> MakeUpstreamClient(const UpstreamUrl& url,
                                                    const UpstreamAccess& access);

// GET <url>/metrics with the same TLS verification and key, within timeout_ms (connect and
// read): the body of a 200 answer, "" for any other answer (the instance answered: alive, its
// figures unknown), an error naming it when nothing answered. What the cluster's load poller
// reads members with (kvferry/cluster/cluster.h, fetch_metrics).
StatusOr<std::string> FetchMetrics(const std::string& url, const UpstreamAccess& access,
                                   int64_t timeout_ms);

// An upstream's answer to a small request: its HTTP status and whole body.
struct UpstreamAnswer {
  int status = 0;
  std::string body;
};

// POST <url><path> with a JSON body, the same TLS verification and key, within timeout_ms
// (connect, write and read each): the answer whatever its status, an error naming the URL
// when nothing answered. For the proxy's side requests (a member's /tokenize, a prefix lease),
// not for the legs, which stream (stream_relay.h).
StatusOr<UpstreamAnswer> PostJson(const std::string& url, const UpstreamAccess& access,
                                  const std::string& path, const std::string& body,
                                  int64_t timeout_ms);

}  // namespace kvferry::proxy
