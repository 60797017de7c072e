// Normalizers: the first stage of the pipeline, rewriting the text of each piece between added
// tokens before it is pre-tokenized, as the "normalizer" section of a tokenizer.json describes.
// Supported types: NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip, Sequence; any other
// type is a kUnimplemented error naming it.
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
#include "tokenizer/unicode.h"

namespace kvferry::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8; stays valid). kResourceExhausted when the result would exceed
  // `max_bytes`, which bounds what a hostile file can make of a short text.
  virtual Status Normalize(std::string* text, size_t max_bytes) const = 0;
};

// From a non-null "normalizer" section.
StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const JsonSection& section);

// For pipelines built in code (GGUF, built-in).
std::unique_ptr<Normalizer> MakeUnicodeNormalizer(NormalizationForm form);
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prepend);
std::unique_ptr<Normalizer> MakeReplaceNormalizer(Pattern pattern, std::string content);
std::unique_ptr<Normalizer> MakeSequenceNormalizer(
    std::vector<std::unique_ptr<Normalizer>> normalizers);

}  // namespace kvferry::tokenizer
