#include "server/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvferry/jinja/chat.h"

namespace kvferry::server {
namespace {

// kvferry's byte-level models: "<|role|>\ncontent\n" per message, then "<|assistant|>\n".
constexpr std::string_view kBuiltinTemplate =
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

// --chat-template takes a file or the template text itself (vLLM does the same).
StatusOr<std::string> ReadOverride(const std::string& value) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(value, ec)) {
    if (value.find("{%") == std::string::npos && value.find("{{") == std::string::npos) {
      return NotFoundError("--chat-template: '" + value +
                           "' is neither a readable file nor a Jinja template");
    }
    return value;
  }
  std::ifstream in(value);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return NotFoundError("--chat-template: cannot read '" + value + "'");
  return text.str();
}

bool IsBuiltinByteVocabulary(const tokenizer::Tokenizer& t) {
  return t.vocab_size() == tokenizer::Tokenizer::kBuiltinVocabSize &&
         t.bos_token_id() == tokenizer::Tokenizer::kBuiltinBos;
}

std::map<std::string, std::string> SpecialTokens(const tokenizer::Tokenizer& t) {
  std::map<std::string, std::string> out;
  const tokenizer::SpecialTokens& s = t.special_tokens();
  auto put = [&out](const char* name, const std::string& value) {
    if (!value.empty()) out[name] = value;
  };
  put("bos_token", s.bos);
  put("eos_token", s.eos);
  put("unk_token", s.unk);
  put("pad_token", s.pad);
  return out;
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Create(const std::string& override_source,
                                            const tokenizer::Tokenizer& tokenizer) {
  ChatTemplate t;
  t.special_tokens_ = SpecialTokens(tokenizer);
  std::string text;
  if (!override_source.empty()) {
    KVF_ASSIGN_OR_RETURN(text, ReadOverride(override_source));
    t.source_ = "--chat-template";
  } else if (!tokenizer.chat_template().empty()) {
    text = tokenizer.chat_template();
    t.source_ = "model";
  } else if (IsBuiltinByteVocabulary(tokenizer)) {
    text = std::string(kBuiltinTemplate);
    t.source_ = "built-in";
    t.builtin_ = true;
  } else {
    t.source_ = "none";
    return t;
  }
  StatusOr<jinja::Template> parsed = jinja::Template::Parse(text);
  if (!parsed.ok()) return parsed.status().WithContext("chat template (" + t.source_ + ")");
  t.template_ = std::move(parsed).value();
  return t;
}

StatusOr<std::string> ChatTemplate::Render(const OpenAiRequest& request) const {
  if (!template_) {
    return InvalidArgumentError(
        "this model has no chat template (none in its tokenizer files): start the server with "
        "--chat-template FILE, or use /v1/completions");
  }
  jinja::ChatInputs in;
  in.messages = request.chat_messages;
  in.tools = request.tools;
  in.add_generation_prompt = request.add_generation_prompt;
  in.special_tokens = special_tokens_;
  in.extra = request.chat_template_kwargs;
  return jinja::RenderChat(*template_, in);
}

}  // namespace kvferry::server
