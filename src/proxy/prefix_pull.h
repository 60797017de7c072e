// PrefixPull (proxy-internal): a P that lacks a prefix another member holds reads it from that
// member over the transfer engine instead of computing it (docs/deploy.md, "Prefix pulls").
//
// For a prefill leg to member P, the source is the routing policy's (cluster::ChoosePrefixSource,
// over the healthy members and the KV index's confirmed holdings). The proxy asks the source
// for a lease on them: a /v1/completions request for the prompt's first h + 1 token ids (h: the
// tokens it holds, whole blocks), max_tokens 1, do_remote_decode — its prefix cache serves the h
// tokens and it computes one. Its kv_transfer_params name the blocks; cut to the h tokens' whole
// blocks and without its first token, they become P's, beside do_remote_decode: P pulls them
// (leased and generation-checked as any pull), computes the rest of the prompt, and hands off to D
// as usual. A lease that fails costs nothing (P computes the whole prompt); a pull that fails is
// recomputed by P's connector (kv_load_failure_policy recompute): the answer is the same either
// way. P's read-done notification ends the source's lease.
//
// Thread-safety: the free functions are pure; PrefixPuller's methods may be called from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvferry/cluster/routing.h"
#include "kvferry/common/status.h"
#include "kvferry/proxy/upstream.h"

namespace kvferry::proxy {

using cluster::PrefixSource;

// The lease request to the source: the client's model, the first `tokens` + 1 ids as the
// prompt, greedy, one token, do_remote_decode.
StatusOr<std::string> BuildPrefixLeaseBody(std::string_view client_body,
                                           std::span<const int32_t> ids, int64_t tokens);

// P's prefill body with the source's kv_transfer_params (its lease answer's) cut to `tokens`
// (whole blocks of `source_block_size`), its first token dropped, do_remote_decode kept.
StatusOr<std::string> WithPrefixSource(std::string_view prefill_body,
                                       std::string_view source_params_json, int64_t tokens,
                                       int32_t source_block_size);

// The lease call and the counters (kvferry:proxy_prefix_pulls_total, ..._tokens_total).
class PrefixPuller {
 public:
  // `timeout_ms`: the lease request's connect, write and read each.
  PrefixPuller(UpstreamAccess upstream, int64_t timeout_ms, int64_t min_tokens)
      : upstream_(std::move(upstream)), timeout_ms_(timeout_ms), min_tokens_(min_tokens) {}

  int64_t min_tokens() const { return min_tokens_; }
  // `prefill_body` for P, with a lease on `source`'s blocks; as it is when the lease fails.
  // Sets *leased when it carries one.
  std::string BodyFor(const PrefixSource& source, std::span<const int32_t> ids,
                      const std::string& client_body, const std::string& prefill_body,
                      const std::string& request_id, bool* leased);
  // P's answer to a body that carried a lease: counts how its pull went (its kv_load).
  void CountOutcome(std::string_view p_answer);
  std::string RenderMetrics() const;

 private:
  const UpstreamAccess upstream_;
  const int64_t timeout_ms_, min_tokens_;
  std::atomic<int64_t> leased_{0}, lease_failed_{0}, pulled_{0}, notify_only_{0}, pull_failed_{0},
      leased_tokens_{0};
};

}  // namespace kvferry::proxy
