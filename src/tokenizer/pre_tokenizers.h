// Pre-tokenizers: the second stage, splitting the normalized text of a piece into the words the
// model tokenizes independently, as the "pre_tokenizer" section of a tokenizer.json describes.
// Supported types: Split (String or Regex pattern, every SplitDelimiterBehavior, invert),
// ByteLevel (add_prefix_space, use_regex), Metaspace (replacement, prepend_scheme, split),
// Digits, Sequence; any other type is a kUnimplemented error naming it.
//
// Internal to src/tokenizer. Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "tokenizer/json_section.h"
#include "tokenizer/pattern.h"

namespace kvferry::tokenizer {

// One word of the text being pre-tokenized.
struct PreToken {
  std::string text;
  // Begins where the whole input text begins (Metaspace's prepend_scheme "first" needs it).
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every word of *words by its pieces, in order; empty pieces are dropped.
  // kResourceExhausted when the words would exceed `max_bytes` in total.
  virtual Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const = 0;
};

// From a non-null "pre_tokenizer" section.
StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const JsonSection& section);

// For pipelines built in code (GGUF, built-in).
std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(Pattern pattern, SplitBehavior behavior,
                                                    bool invert);
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps);

// GPT-2's word regex, which ByteLevel applies when use_regex is set.
inline constexpr const char* kGpt2WordRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kvferry::tokenizer
