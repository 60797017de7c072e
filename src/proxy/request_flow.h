// RequestFlow (proxy-internal): one generation request through the cluster (docs/serving.md,
// "kvferry proxy"; docs/deploy.md, "Failures").
//
//   1. prefill leg: a P from the cluster (least pending tokens, prefix affinity), the
//      prefill-only body (handoff.h). A P that cannot be reached, times out or answers 5xx
//      before returning is left for another P, up to `max_tries` members per leg, each try
//      within its own deadline. A P's 4xx is the client's answer (another P would say the same).
//   2. decode leg: a D (fewest sequences, KV headroom; not the request's P if another D exists)
//      with the client's body and P's kv_transfer_params. A D that fails before its first token
//      reaches the proxy — unreachable, 5xx, closed or silent before the first streamed chunk,
//      or before the whole answer of a non-streamed request — is left for another D with the
//      same kv_transfer_params: P still holds the blocks under its lease, and if it no longer
//      can (P died, the lease ran out) the new D recomputes.
//   3. once the first chunk of a stream went to the client nothing is retried: a D failing
//      mid-stream ends the stream with an OpenAI error event and [DONE], never repeated tokens.
//   0. conditional disaggregation (disagg_min_uncached_tokens): when the prompt's length in
//      tokens is known (kv routing tokenized it, or it came as ids), the D it would go to is
//      picked first; if fewer than the threshold of its tokens are not already held by that D,
//      the client's body goes to that D as it is (retried on another D as in 2), and no P
//      computes. Otherwise the request goes on at 1.
//   1b. prefix pull (prefix_pull.h): before each prefill try, when another member holds enough
//      more of the prompt than the picked P and P can load, the source is asked for a lease and
//      P's body carries it: P pulls that prefix and computes the rest. The answer names the
//      source in X-Kvferry-Prefix-Source.
//   P's first token (kv_transfer_params.first_token_id, first_token.h): a stream sends it as
//   the first event as soon as P answered and places the D leg from the stream provider (the
//   first D picked before the headers, which name it; D's retries as in 2; none answered: an
//   error event and [DONE]). When the token ends the request
//   (P's finish_reason "stop", or the client's max_tokens 1, for which P gets the body without
//   kv_transfer_params), P's answer is the client's and no D computes; a lease P granted anyway
//   (a stop string) is given back through a D asked for max_tokens 1.
//
// The client's answer carries X-Request-Id (one id for both legs) and X-Kvferry-Prefill /
// X-Kvferry-Decode, the ids of the members that served it.
//
// Thread-safety: one RequestFlow per request, on its handler thread (the stream provider it
// installs runs on that thread too).
#pragma once

#include <cstdint>
#include <string>

#include "kvferry/cluster/cluster.h"
#include "kvferry/proxy/upstream.h"
#include "proxy/drain.h"
#include "proxy/kv_router.h"
#include "proxy/prefix_pull.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kvferry::proxy {

struct FlowOptions {
  int64_t connect_timeout_ms = 2000;
  int64_t prefill_timeout_ms = 120000;
  int64_t decode_timeout_ms = 300000;
  int32_t max_tries = 3;
  int32_t affinity_prefix = 128;
  UpstreamAccess upstream;               // toward P and D: the proxy's key and CA bundle
  bool first_token_from_prefill = true;  // ProxyOptions::first_token_from_prefill
  Drain* drain = nullptr;                // the proxy's shutdown state (drain.h); null: none
  KvRouter* kv = nullptr;                // --routing kv: the members' KV index; null: none
  // Conditional disaggregation: a request whose prompt tokens not held by its D are fewer than
  // this goes to that D alone, which prefills it (0: always P then D).
  int64_t disagg_min_uncached_tokens = 0;
  // Prefix pulls (prefix_pull.h; needs kv): null: none.
  PrefixPuller* prefix_pull = nullptr;
};

// Serves `req` (POST /v1/completions or /v1/chat/completions) into `res`.
void ServeGenerate(cluster::Cluster* cluster, const FlowOptions& options,
                   const httplib::Request& req, httplib::Response& res);

}  // namespace kvferry::proxy
