// ProxyServer: `kvferry proxy`, the router in front of prefill (P) and decode (D) instances
// (docs/serving.md, "kvferry proxy"; the hand-off: docs/connector.md §2).
//
// For each POST /v1/completions or /v1/chat/completions it picks a P and a D from the cluster
// (kvferry/cluster/cluster.h: the static lists, or the members registered in etcd; by load, with
// prefix affinity for P), sends P the prefill-only request (handoff.h), then D the client's
// request with P's kv_transfer_params, and passes D's answer through — streamed as it arrives
// when the client asked for a stream. A member that fails before the client saw a token is
// left for another (proxy/request_flow.h). One X-Request-Id (the client's, or a new one) goes
// to both legs. When no member can serve, the answer is an OpenAI-style error naming the last
// one tried (503 unreachable, 504 timed out, 502 when P or D refused the proxy's own key, P's or
// D's own error status otherwise) within the configured timeouts, never a hang. GET /health (and
// /healthcheck, as vLLM's proxy) answers 200; GET /v1/models is forwarded to a D; GET /metrics is
// the proxy's Prometheus text and GET /cluster its routing table (docs/deploy.md, "Proxy metrics").
// With API keys, clients must present one (http/api_key.h); toward P and D the proxy presents its
// own upstream key, never the client's. It listens with TLS when given a certificate, and reaches
// https:// upstreams with TLS verified against upstream.ca_file (docs/deploy.md).
//
// Thread-safety: Start/Stop from one controlling thread; handlers run on the server's own pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvferry/cluster/routing.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/http/api_key.h"
#include "kvferry/http/tls_server.h"
#include "kvferry/proxy/upstream.h"

namespace kvferry::proxy {

struct ProxyOptions {
  std::string host = "127.0.0.1";
  int port = 8192;  // 0: an ephemeral port, see ProxyServer::port()
  std::vector<std::string> prefill_urls;
  std::vector<std::string> decode_urls;
  int64_t connect_timeout_ms = 2000;
  int64_t prefill_timeout_ms = 120000;  // P's whole answer
  int64_t decode_timeout_ms = 300000;   // D's first byte, and the longest gap between chunks
  int max_connections = 1024;  // client connections served at once (http/connection_threads.h)
  int64_t request_read_timeout_ms =
      30000;                     // a request's headers and body (http/request_deadline.h)
  http::ApiKeyOptions api_keys;  // what clients must present (none: open)
  http::TlsServerFiles tls;      // the proxy's own listener (none: plain HTTP)
  UpstreamAccess upstream;       // toward P and D: key and CA bundle
  // A cluster instead of the static lists: etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE].
  std::string registry;
  cluster::RoutingConfig routing;
  int32_t max_tries = 3;           // members tried per leg
  int64_t poll_interval_ms = 200;  // members' /metrics (load and health)
  // P's first output token goes to the client and D resumes after it (docs/serving.md,
  // "kvferry proxy"). false: the older hand-off, for decode instances that do not know
  // kv_transfer_params.first_token_id (vLLM's): D recomputes the first token and streams it.
  bool first_token_from_prefill = true;
  // Conditional disaggregation (request_flow.h, step 0): prompts with fewer tokens not held by
  // their D than this skip P (0: never).
  int64_t disagg_min_uncached_tokens = 0;
  // Prefix pulls (docs/deploy.md): a P (kv_role kv_both) lacking at least this many leading
  // prompt tokens that another member holds pulls them from it instead of computing them.
  // 0: never; -1: 128 with kv routing, never otherwise. Needs members publishing KV events.
  int64_t prefix_pull_min_tokens = -1;
};

class ProxyServer {
 public:
  // InvalidArgument for a bad URL or registry address, or (without a registry) an empty
  // prefill or decode list.
  static StatusOr<std::unique_ptr<ProxyServer>> Create(ProxyOptions options);
  ~ProxyServer();
  ProxyServer(const ProxyServer&) = delete;
  ProxyServer& operator=(const ProxyServer&) = delete;

  // Binds and serves on a background thread; Unavailable when the address cannot be bound,
  // InvalidArgument for unusable TLS files or API keys. With a registry it first waits (up to
  // 5 s) for a healthy prefill and decode member, so its first requests are routed.
  Status Start();
  int port() const;
  void Stop();

  // Shutting down (SIGTERM, docs/serving.md): from BeginDrain() on, new generation requests and
  // /health answer 503 while the requests already admitted run on; WaitIdle() returns true once
  // none is left, false at `deadline`; CutStreams() then ends the streams still relayed with an
  // error event and [DONE] (within ~0.1 s) rather than leaving them cut off by Stop().
  void BeginDrain();
  bool WaitIdle(const Deadline& deadline);
  void CutStreams();
  int64_t in_flight() const;
  // All of it, as `kvferry proxy` does on SIGTERM: BeginDrain, WaitIdle for `drain_timeout_ms`,
  // then CutStreams and 1 s for them to end, then Stop.
  void Shutdown(int64_t drain_timeout_ms);

 private:
  struct Impl;
  explicit ProxyServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvferry::proxy
