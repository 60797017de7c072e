// Upstream key refusals (proxy-internal): an upstream (P, D, or an instance serving both) that
// answers the proxy 401 or 403 refused the proxy's own key (--upstream-api-key), never the
// client's: the proxy checked the client's key itself and does not forward it. That is the
// proxy's misconfiguration, not the client's, so the client gets 502 (bad gateway) with an
// OpenAI error naming the flag, not the upstream's 401. Each refusal is counted
// (kvferry:proxy_upstream_auth_failures_total{upstream="host:port"}) and the first of each
// upstream is logged (docs/deploy.md, "API keys").
//
// Thread-safety: free functions; the cluster's counter is thread-safe.
#pragma once

#include <string>

#include "kvferry/cluster/cluster.h"
#include "kvferry/proxy/upstream.h"

namespace kvferry::proxy {

inline constexpr int kUpstreamKeyRefusedStatus = 502;

// True for an upstream's 401 or 403.
inline bool RefusesProxyKey(int http_status) { return http_status == 401 || http_status == 403; }

// Counts and (the first time for `url`) logs the refusal of `who` (e.g. "prefill instance
// http://h:p"), which answered `http_status`; returns the client's error body (with code
// kUpstreamKeyRefusedStatus). `key_set`: whether the proxy presented a key at all.
std::string UpstreamKeyRefused(cluster::Cluster* cluster, const UpstreamUrl& url,
                               const std::string& who, int http_status, bool key_set);

}  // namespace kvferry::proxy
