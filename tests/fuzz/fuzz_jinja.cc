// libFuzzer target: kvferry::jinja (include/kvferry/jinja/template.h), Template::Parse and
// Render of arbitrary template text with a fixed chat-like context and tight limits.
//
// Properties: no crash, sanitizer report or hang (the limits end runaway templates); every
// error has a message; rendering twice gives the same result; an output is valid UTF-8 and
// within the output limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "jinja/utf8.h"
#include "kvferry/jinja/template.h"

namespace {

const nlohmann::ordered_json& Context() {
  static const auto* ctx = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Héllo <b> 世界 \"q\" 'a'\n"},
      {"role": "assistant", "content": "<think>r</think>ok", "tool_calls": [
        {"id": "call12345", "type": "function",
         "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null, true]}}}]},
      {"role": "tool", "content": "{\"v\": 2}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "n": 3, "f": -2.5, "s": "abc", "xs": [3, 1, 2], "d": {"b": 1, "a": {"c": [1]}}
  })"));
  return *ctx;
}

kvferry::jinja::RenderOptions Limits() {
  kvferry::jinja::RenderOptions o;
  o.max_depth = 200;
  o.max_output_bytes = 1 << 16;
  o.max_steps = 20000;
  o.now = std::tm{};
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = kvferry::jinja::Template::Parse(source);
  if (!tmpl.ok()) {
    if (tmpl.status().message().empty()) std::abort();
    return 0;
  }
  static const kvferry::jinja::RenderOptions options = Limits();
  auto first = tmpl->Render(Context(), options);
  auto second = tmpl->Render(Context(), options);
  if (first.ok() != second.ok()) std::abort();
  if (!first.ok()) {
    if (first.status().message().empty() || !(first.status() == second.status())) std::abort();
    return 0;
  }
  if (*first != *second || first->size() > options.max_output_bytes) std::abort();
  if (!kvferry::jinja::utf8::IsValid(*first)) std::abort();
  return 0;
}
