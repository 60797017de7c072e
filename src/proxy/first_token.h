// First-token hand-off (proxy-internal, pure): what the proxy reads from P's answer to decide
// whether D is needed, and P's answer turned into the first server-sent event of a stream, so
// the client's first token leaves as soon as P answered (docs/serving.md, "kvferry proxy").
//
// P's answer is a non-streamed completion or chat completion of one token whose
// kv_transfer_params may carry P's first token (first_token_id, docs/connector.md §2). Its
// text is what a colocated stream would have sent for that token (the server holds back an
// incomplete character or a possible stop-string prefix when a D continues).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::proxy {

struct PrefillAnswer {
  std::string kv_transfer_params;  // JSON text of the object; empty when P returned none
  bool has_first_token = false;    // kv_transfer_params.first_token_id is there
  std::string finish_reason;       // of P's one choice
  bool holds_blocks = false;       // kv_transfer_params.remote_block_ids is not empty
  // P's first token is the whole answer: the request stopped on it (eos, a stop token or
  // string: finish_reason "stop"). A "length" finish means only that P generates one token.
  bool ends_request() const { return has_first_token && finish_reason != "length"; }
};

// InvalidArgument when `body` is not a JSON object with one choice.
StatusOr<PrefillAnswer> ReadPrefillAnswer(std::string_view body);

// `answer` for a D that does not resume after P's token: first_token_* and sampling_seed
// removed from its kv_transfer_params (D then computes the first token itself).
PrefillAnswer WithoutFirstToken(PrefillAnswer answer);

// The client's max_tokens (max_completion_tokens when both are there, as the server reads
// them); nullopt when absent or not an integer.
std::optional<int64_t> ClientMaxTokens(std::string_view client_body);

// P's answer as one stream chunk ("data: {...}\n\n"): a chat message becomes a delta (role and
// content), usage, kv_transfer_params and kv_load are dropped, and finish_reason is P's when
// `final`, else null. InvalidArgument when `body` is not a completion.
StatusOr<std::string> PrefillAnswerAsChunk(std::string_view body, bool final);

// The usage event of P's answer (stream_options.include_usage), "" when it has none.
std::string PrefillUsageChunk(std::string_view body);

// Whether the client asked for the usage event of a stream (stream_options.include_usage).
bool WantsUsageChunk(std::string_view client_body);

}  // namespace kvferry::proxy
