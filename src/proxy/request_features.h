// RequestFeatures (proxy-internal): what routing needs from a client's OpenAI body, as pure
// functions — the proxy does not tokenize (it knows nothing of models), so prompts are measured
// in UTF-8 bytes of text, or in token ids when the client sent ids.
//
//   affinity key: FNV-1a 64 of the prompt's first `affinity_prefix` units (bytes of text, or
//                 token ids); none when the prompt is shorter. A chat request's text is each
//                 message's role and content in order (the chat template adds the same text
//                 around the same messages, so equal leading messages give equal keys).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvferry/cluster/route.h"

namespace kvferry::proxy {

// A body that is not JSON, or has no prompt/messages, gives an empty RouteRequest (no affinity,
// size 0): the body's own error is the instance's to report.
cluster::RouteRequest RouteRequestOf(std::string_view client_body, int32_t affinity_prefix);

// usage.prompt_tokens of an instance's answer (P's prefill answer), when present.
std::optional<int64_t> PromptTokensOf(std::string_view response_body);
// usage.prompt_tokens_details.cached_tokens of an instance's answer, when present.
std::optional<int64_t> CachedTokensOf(std::string_view response_body);

}  // namespace kvferry::proxy
