// libFuzzer target: server::ParseOpenAiRequest (include/kvferry/server/openai_protocol.h), the
// function that turns a /v1/completions or /v1/chat/completions body into a request.
//
// Properties: no crash or sanitizer report, for both API kinds; an accepted request has
// sampling parameters that pass SamplingParams::Validate (the server relies on it), and a chat
// request's messages each have a string role and string (or null) content, as the chat
// template expects (server/chat_template.h).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvferry/server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto kind : {kvferry::server::ApiKind::kCompletion, kvferry::server::ApiKind::kChat}) {
    auto req = kvferry::server::ParseOpenAiRequest(kind, body);
    if (!req.ok()) continue;
    if (req->max_tokens_set && !req->params.Validate().ok()) std::abort();
    if (kind == kvferry::server::ApiKind::kChat) {
      if (req->chat_messages.empty()) std::abort();
      for (const auto& m : req->chat_messages) {
        if (!m["role"].is_string() || !(m["content"].is_string() || m["content"].is_null())) {
          std::abort();
        }
      }
    }
  }
  return 0;
}
