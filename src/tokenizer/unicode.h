// Unicode properties and transforms the tokenizer stages need, on top of libutf8proc (Unicode
// normalization forms, general categories, simple lower-casing).
//
// Internal to src/tokenizer. Inputs are valid UTF-8. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::tokenizer {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` in the given normalization form.
StatusOr<std::string> NormalizeUnicode(std::string_view text, NormalizationForm form);

// Lower-cases every character (Unicode default case mapping, as Rust's str::to_lowercase
// except for the Greek final-sigma context rule).
std::string ToLowerUnicode(std::string_view text);

// White_Space property (what Rust's char::is_whitespace and regex \s test).
bool IsWhitespace(char32_t cp);
// General category N* (Rust's char::is_numeric).
bool IsNumeric(char32_t cp);
// A "word" character for \w: letters, marks, decimal and letter numbers, connector punctuation.
bool IsWordChar(char32_t cp);

}  // namespace kvferry::tokenizer
