// kvferry's Jinja renderer for chat templates: Template::Parse once, Render many times.
//
// It renders the subset of Jinja2 that Hugging Face chat templates use, with the environment
// transformers' apply_chat_template builds (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, the loopcontrols extension, `raise_exception`, `strftime_now` and a `tojson`
// that keeps non-ASCII text and key order), so that the output matches Jinja2's byte for byte.
// docs/templates.md lists what is supported; tests/jinja checks it against Jinja2 itself.
//
//   auto t = kvferry::jinja::Template::Parse(source);            // StatusOr<Template>
//   auto text = t->Render(nlohmann::ordered_json{{"messages", msgs}});
//
// Errors are values: a template that does not parse, or fails while rendering, gives
// kInvalidArgument with "line L, column C: message" (kUnimplemented for Jinja2 features this
// renderer leaves out); `raise_exception(msg)` gives kInvalidArgument with exactly `msg`; a
// render that runs past RenderOptions' limits gives kOutOfRange.
//
// Thread-safety: a Template is immutable after Parse; copies share it, and any number of
// threads may Render the same Template at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::jinja {

struct RenderOptions {
  // How deeply statements, expressions and macro calls may nest while rendering (Python
  // itself stops at 1000 frames; a Jinja2 macro call takes several).
  int max_depth = 500;
  // The most bytes the output, or any one string built while rendering, may have.
  size_t max_output_bytes = size_t{16} << 20;
  // Work per render: one step per loop iteration, macro call and item a filter walks, and per
  // KiB a string operation reads or writes.
  int64_t max_steps = 2'000'000;
  // The local time strftime_now() formats; unset: the current local time.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Parses `source` (UTF-8). Fails with the first syntax error's line and column.
  static StatusOr<Template> Parse(std::string_view source);

  // Renders with `context` as the template's variables (a JSON object). Objects keep their
  // key order, which `tojson` and iteration over a dict expose.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                               const RenderOptions& options = {}) const;

 private:
  struct Impl;
  explicit Template(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kvferry::jinja
