// The OpenAI-compatible wire protocol of `kvferry serve`: parsing /v1/completions and
// /v1/chat/completions request bodies into one OpenAiRequest, and formatting responses, stream
// chunks (server-sent events) and usage, as vLLM does — including `kv_transfer_params` in the
// request and at the top level of the response (docs/serving.md, "Endpoints";
// docs/connector.md §2).
//
// Supported request fields: model, prompt (string, token-id array, or a one-element array of
// either), messages (chat; string content or an array of text parts), max_tokens /
// max_completion_tokens, temperature, top_p, top_k, seed, n (1 only), stream,
// stream_options.include_usage, logprobs (completions: 0..20 alternatives; chat: bool with
// top_logprobs 0..20), stop (string or array: at most kMaxStopStrings of at most
// kMaxStopStringBytes each), stop_token_ids (at most kMaxStopTokenIds), ignore_eos,
// return_token_ids, kv_transfer_params, add_special_tokens; chat only: tools, chat_template_kwargs,
// add_generation_prompt (the chat template's inputs, server/chat_template.h). Unknown fields and
// nulls are ignored, as OpenAI servers do. A wrong type or value is InvalidArgument naming the
// field (HTTP 400 through http_error.h).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/engine/sampling_params.h"

namespace kvferry::server {

enum class ApiKind { kCompletion, kChat };

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;                      // may be empty: the served model
  std::string prompt_text;                // completions text prompt
  std::vector<int32_t> prompt_token_ids;  // completions token-id prompt
  bool prompt_is_tokens = false;
  // chat: messages as the template sees them (client key order; content as text), and the
  // template's other inputs (vLLM's fields).
  nlohmann::ordered_json chat_messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  std::optional<bool> add_special_tokens;  // unset: the server's default (chat_template.h)
  engine::SamplingParams params;           // max_tokens, temperature, ... (engine defaults: greedy)
  bool max_tokens_set = false;             // false: the server picks the default
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report each token's logprob (params.top_logprobs alternatives)
  bool return_token_ids = false;
  std::vector<std::string> stop;  // stop strings, matched on the generated text
  std::optional<connector::KvTransferParams> kv_transfer_params;
};

// Bounds on what one request may ask of the engine per generated token (each stop string is
// matched at every token, each stop token id looked up): docs/reliability.md, "Request limits".
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;

// Parses a request body. InvalidArgument naming the field on bad JSON, types or values.
StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, std::string_view body);

// One generated token as reported in logprobs.
struct TokenLogprobInfo {
  int32_t token_id = 0;
  std::string text;  // raw bytes of the token (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
};

// A choice: the whole answer, or the delta of one stream chunk.
struct ChoiceOutput {
  std::string text;
  std::vector<int32_t> token_ids;          // reported when return_token_ids
  std::vector<TokenLogprobInfo> logprobs;  // reported when logprobs
  std::string finish_reason;               // "" while not finished
  int32_t text_offset = 0;                 // completions logprobs: offset of this delta's text
};

struct ResponseHeader {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  bool return_token_ids = false;
  // With return_token_ids: the prompt's ids, on the completion choice or (chat) at the top level
  // of the response, in the first chunk of a stream (vLLM's prompt_token_ids).
  std::vector<int32_t> prompt_token_ids;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens from the prefix cache or remote KV
};

// What a finished request says about disaggregation, beside its choices:
//   "kv_transfer_params"  P: the hand-off record for D (vLLM's field; null when none)
//   "kv_load"             D: how the prompt's KV arrived (kvferry's field, docs/serving.md):
//                         {"outcome": "pulled" | "notify_only" | "none_offered" |
//                          "failed_handshake" | "failed_transfer" | "failed_deadline" |
//                          "failed_generation", "local_hit_tokens", "pulled_tokens",
//                          "pulled_bytes", "descriptors"}
struct KvHandoff {
  std::optional<connector::KvTransferParams> params;
  std::optional<connector::LoadReport> load;
};

// A non-streaming response body.
std::string FormatResponse(const ResponseHeader& header, const ChoiceOutput& choice,
                           const Usage& usage, const KvHandoff& kv = {});

// One server-sent event ("data: {...}\n\n") carrying a delta. `first` adds the chat role.
// `kv` is attached to the final chunk (the caller passes it only then).
std::string FormatStreamChunk(const ResponseHeader& header, const ChoiceOutput& delta, bool first,
                              const KvHandoff& kv = {});

// The usage event sent before [DONE] when stream_options.include_usage.
std::string FormatUsageChunk(const ResponseHeader& header, const Usage& usage);

// A server-sent event carrying an error object (stream already started).
std::string FormatStreamError(const std::string& error_body);

inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

// Splits `pending` into the longest prefix that is complete UTF-8 (returned) and the trailing
// incomplete multi-byte sequence (kept in `pending`). Invalid bytes are returned as they are
// (the JSON writer replaces them).
std::string TakeCompleteUtf8(std::string* pending);

}  // namespace kvferry::server
