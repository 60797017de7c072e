// ChatTemplate (server-internal): turns a chat request's messages into the prompt text, with the
// model's Jinja chat template rendered as transformers' apply_chat_template does (kvferry::jinja).
//
// Which template: `--chat-template` (a file, or the template text itself, as vLLM takes it); else
// the model's own (tokenizer_config.json's chat_template, or the GGUF's tokenizer.chat_template);
// else, for kvferry's byte-level built-in vocabulary, its built-in template
//   "<|role|>\ncontent\n" per message, then "<|assistant|>\n".
// A real model with no template answers chat requests with a 400 naming --chat-template.
//
// Special tokens: a template written for a real tokenizer spells them itself ({{ bos_token }}),
// so the rendered text is encoded without adding any (vLLM's default for chat); the byte
// vocabulary cannot spell <bos> in text, so with the built-in template they are added. A
// request's "add_special_tokens" overrides either default.
//
// Thread-safety: immutable after Create(); Render() may run on many threads at once.
#pragma once

#include <optional>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/jinja/template.h"
#include "kvferry/server/openai_protocol.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::server {

class ChatTemplate {
 public:
  // `override_source`: --chat-template's value ("" for none). InvalidArgument (with line and
  // column) when the chosen template does not parse; NotFound for an unreadable file.
  static StatusOr<ChatTemplate> Create(const std::string& override_source,
                                       const tokenizer::Tokenizer& tokenizer);

  // The prompt text of a chat request. InvalidArgument when the model has no template, or the
  // template rejects the chat (its raise_exception message), or rendering fails.
  StatusOr<std::string> Render(const OpenAiRequest& request) const;

  // Whether the rendered text is encoded with the tokenizer's special tokens added.
  bool AddSpecialTokens(const OpenAiRequest& request) const {
    return request.add_special_tokens.value_or(builtin_);
  }

  // Where the template came from: "--chat-template", "model" or "built-in" ("none" if absent).
  const std::string& source() const { return source_; }

 private:
  std::optional<jinja::Template> template_;
  std::map<std::string, std::string> special_tokens_;  // bos_token, eos_token, ... that are set
  std::string source_;
  bool builtin_ = false;
};

}  // namespace kvferry::server
