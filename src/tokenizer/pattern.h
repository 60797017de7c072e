// What the Split pre-tokenizer, the Replace normalizer and the Replace decoder search for: a
// tokenizer.json "pattern" ({"String": "..."} or {"Regex": "..."}), and the splitting of a text
// at its matches with one of Hugging Face's SplitDelimiterBehavior values.
//
// Internal to src/tokenizer. Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "tokenizer/json_section.h"
#include "tokenizer/regex.h"

namespace kvferry::tokenizer {

// A slice [begin, end) of a text and whether it is a match of the pattern.
struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

class Pattern {
 public:
  static StatusOr<Pattern> FromJson(const JsonSection& section);
  static StatusOr<Pattern> FromString(std::string_view literal);
  static StatusOr<Pattern> FromRegex(std::string_view regex);

  // Spans covering `text` (valid UTF-8) in order, matches and the text between them, as
  // tokenizers' Pattern::find_matches: an empty text gives one empty non-match span.
  StatusOr<std::vector<Span>> FindMatches(std::string_view text) const;

  // `text` with every match replaced by `content`; kResourceExhausted past `max_bytes`.
  StatusOr<std::string> ReplaceAll(std::string_view text, std::string_view content,
                                   size_t max_bytes) const;

  bool is_regex() const { return is_regex_; }
  // The String or Regex text as written in the file.
  const std::string& source() const { return source_; }

 private:
  Pattern(Regex regex, bool is_regex, std::string source)
      : regex_(std::move(regex)), is_regex_(is_regex), source_(std::move(source)) {}

  Regex regex_;
  bool is_regex_;
  std::string source_;
};

// Spans of `text` where each character for which pred(cp) holds is a one-character match.
template <typename Pred>
std::vector<Span> FindCharMatches(std::string_view text, Pred pred);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous".
StatusOr<SplitBehavior> ParseSplitBehavior(const JsonSection& section, const char* key);

// The pieces a split keeps, in order, from the spans of FindMatches (with `invert`, matches and
// non-matches trade places first). Empty pieces are dropped.
std::vector<std::string_view> SplitAtSpans(std::string_view text, std::vector<Span> spans,
                                           SplitBehavior behavior, bool invert);

}  // namespace kvferry::tokenizer

#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {

template <typename Pred>
std::vector<Span> FindCharMatches(std::string_view text, Pred pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> spans;
  size_t last = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t at = i;
    const char32_t cp = NextCodePoint(text, &i);
    if (!pred(cp)) continue;
    if (last < at) spans.push_back({last, at, false});
    spans.push_back({at, i, true});
    last = i;
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
  return spans;
}

}  // namespace kvferry::tokenizer
