// Rendering a chat with a model's chat template the way transformers' apply_chat_template does:
// the template sees `messages`, `tools` and `documents` (none when not given),
// `add_generation_prompt`, the tokenizer's special tokens that are set (`bos_token`,
// `eos_token`, ...) and any extra variables (`enable_thinking`, `date_string`, ...).
//
//   ChatInputs in;
//   in.messages = request["messages"];   // [{"role": "user", "content": "Hi"}, ...]
//   in.add_generation_prompt = true;
//   in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
//   auto prompt = RenderChat(tmpl, in);   // kInvalidArgument with the template's own message
//                                          // when it rejects the chat (raise_exception)
//
// Pass JSON parsed as nlohmann::ordered_json where key order matters (tool arguments printed
// with tojson keep the client's order, as in Python).
//
// Thread-safety: pure function of its arguments; see Template for sharing a template.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/jinja/template.h"

namespace kvferry::jinja {

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // unset: none
  std::optional<nlohmann::ordered_json> documents;  // unset: none
  bool add_generation_prompt = false;
  // The tokenizer's special tokens that are set, by their template names; a token the
  // tokenizer lacks is left out, so that the template sees it undefined (as Qwen's bos_token).
  std::map<std::string, std::string> special_tokens;
  // Further template variables; they may not repeat the names above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// The context apply_chat_template would give the template.
StatusOr<nlohmann::ordered_json> ChatContext(const ChatInputs& inputs);

StatusOr<std::string> RenderChat(const Template& tmpl, const ChatInputs& inputs,
                                 const RenderOptions& options = {});

}  // namespace kvferry::jinja
