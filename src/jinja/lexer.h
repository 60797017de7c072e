// Lexer: template source -> tokens, with Jinja2's lexing rules and Hugging Face's environment
// (trim_blocks, lstrip_blocks, keep_trailing_newline=False):
//
//   - line endings (\r\n, \r, \n) become \n and one trailing newline of the source is dropped;
//   - text outside tags becomes kData, comments {# #} disappear, {% raw %} bodies are data;
//   - `{%-`, `{{-`, `{#-` strip the whitespace before the tag, `-%}`, `-}}`, `-#}` the
//     whitespace after it;
//   - trim_blocks: the first newline after a block or comment tag is removed (not after `+%}`);
//   - lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
//     removed (not before `{%+`, not before `{{`);
//   - inside a tag: names, strings (Python escapes decoded), integers, floats, operators, with
//     brackets balanced (`}}` inside a dict literal does not close the tag).
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::jinja {

enum class TokenKind : uint8_t {
  kData,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  // data, name, decoded string, or operator spelling
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t offset = 0;  // byte offset into the normalized source, for line and column
};

// The source after newline normalization, which token offsets refer to; turns an offset into
// "line L, column C" (1-based; columns count code points).
class SourceMap {
 public:
  explicit SourceMap(std::string normalized);
  const std::string& text() const { return text_; }
  std::string Location(uint32_t offset) const;

 private:
  std::string text_;
  std::vector<uint32_t> line_starts_;
};

// Newline normalization and trailing-newline removal, as Jinja2 does before lexing.
std::string NormalizeNewlines(std::string_view source);

// Tokens of `map.text()`, ending with kEof. Errors (kInvalidArgument) carry line and column.
StatusOr<std::vector<Token>> Tokenize(const SourceMap& map);

}  // namespace kvferry::jinja
