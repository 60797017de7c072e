// Decoders: turn the token strings of ids back into text, as the "decoder" section of a
// tokenizer.json describes. Supported types: ByteLevel, Metaspace, Replace (String pattern),
// ByteFallback, Fuse, Strip, Sequence; any other type is a kUnimplemented error naming it.
//
// Tokens are byte strings here: ByteLevel and ByteFallback produce raw bytes, and the caller
// makes the joined result valid UTF-8 once at the end (ill-formed bytes become U+FFFD, by the
// maximal-subpart rule). Decoding is thus prefix-stable: more tokens never change the text of
// earlier ones, which streaming detokenization relies on.
//
// Internal to src/tokenizer. Thread-safety: immutable after construction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "tokenizer/json_section.h"

namespace kvferry::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites *tokens in place (Hugging Face's decode_chain). `at_start`: tokens[0] begins the
  // text, so the rules for a text's first token apply (Metaspace drops its leading "▁", Strip
  // its leading content); false when decoding the middle of a text.
  virtual void DecodeChain(std::vector<std::string>* tokens, bool at_start) const = 0;
};

// From a non-null "decoder" section.
StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const JsonSection& section);

// For pipelines built in code (GGUF, built-in).
std::unique_ptr<Decoder> MakeByteLevelDecoder();
std::unique_ptr<Decoder> MakeReplaceDecoder(std::string from, std::string to);
std::unique_ptr<Decoder> MakeByteFallbackDecoder();
std::unique_ptr<Decoder> MakeFuseDecoder();
std::unique_ptr<Decoder> MakeStripDecoder(std::string content, size_t start, size_t stop);
std::unique_ptr<Decoder> MakeSequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps);

}  // namespace kvferry::tokenizer
