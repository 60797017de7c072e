// A compiled PCRE2 pattern matched against UTF-8 text, with Unicode properties (PCRE2_UTF |
// PCRE2_UCP: \p{L}, \s and \w are Unicode-aware) and bounded matching work, so that a
// pathological pattern from a tokenizer file fails with an error instead of hanging.
//
// Internal to src/tokenizer. Thread-safety: a Regex is immutable and may be shared; each thread
// matches with its own scratch (match context, match data, JIT stack).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

struct pcre2_real_code_8;

namespace kvferry::tokenizer {

class Regex {
 public:
  // A regular expression in PCRE2 syntax (which accepts the Oniguruma/Python patterns found in
  // tokenizer.json files: (?i:...), \p{L}, lookahead).
  static StatusOr<Regex> Compile(std::string_view pattern);
  // Matches `text` literally; an empty literal matches nothing (as in Hugging Face tokenizers).
  static StatusOr<Regex> Literal(std::string_view text);

  // Calls on_match(begin, end) for every match in `text` (valid UTF-8), left to right and not
  // overlapping; after an empty match the search resumes one character later. Fails with
  // kResourceExhausted when one match attempt exceeds the work limits.
  Status ForEachMatch(std::string_view text,
                      const std::function<void(size_t begin, size_t end)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::shared_ptr<pcre2_real_code_8> code, std::string pattern)
      : code_(std::move(code)), pattern_(std::move(pattern)) {}

  std::shared_ptr<pcre2_real_code_8> code_;  // null: matches nothing
  std::string pattern_;
};

}  // namespace kvferry::tokenizer
