// The P -> D hand-off (docs/connector.md §2) as pure functions over request and response bodies,
// with the same wire behaviour as vLLM's toy_proxy_server.py, so either proxy can front the other's
// instances:
//
//   to P: the client's body with max_tokens = 1 (and max_completion_tokens = 1 when present),
//         stream = false, no stream_options / min_tokens, and
//         kv_transfer_params = {do_remote_decode: true, do_remote_prefill: false,
//                               remote_engine_id: null, remote_block_ids: null,
//                               remote_host: null, remote_port: null}
//   to D: the client's body unchanged except kv_transfer_params = P's response's
//         kv_transfer_params, copied verbatim.
// P keeps the client's sampling fields (temperature, seed, top_p, top_k, logprobs, stop, ...):
// a kvferry P samples the first output token with them and returns it in kv_transfer_params
// (first_token_id), and D resumes after it (docs/connector.md §2).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::proxy {

// InvalidArgument when `client_body` is not a JSON object.
StatusOr<std::string> BuildPrefillBody(std::string_view client_body);

// A request whose answer is P's one token (the client asked for max_tokens 1): the client's
// body with stream = false, no stream_options and no kv_transfer_params — P answers it whole,
// holding nothing for a D. InvalidArgument when `client_body` is not a JSON object.
StatusOr<std::string> BuildWholeOnPrefillBody(std::string_view client_body);

// P's kv_transfer_params (the JSON text of the object). FailedPrecondition when P answered
// without them (P not started as a KV producer), InvalidArgument when P's body is not JSON.
StatusOr<std::string> ExtractKvTransferParams(std::string_view prefill_response_body);

// The client's body with kv_transfer_params replaced by `kv_transfer_params_json`.
StatusOr<std::string> BuildDecodeBody(std::string_view client_body,
                                      std::string_view kv_transfer_params_json);

// Whether the client asked for a streamed answer ("stream": true).
bool WantsStream(std::string_view client_body);

}  // namespace kvferry::proxy
