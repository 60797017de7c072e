// Tokenizer: byte-level, as used by the built-in models. Token id b < 256 is the byte b; ids
// from 256 up are specials: 256 <bos>, 257 <eos>, 258 <pad>, 259 <unk>.
//
// Decode() returns the raw bytes of the byte tokens and drops specials. The bytes need not be
// valid UTF-8 (a model may emit any byte, and a multi-byte character may be split across
// steps); callers that need valid UTF-8 (JSON) must buffer or replace invalid sequences.
//
// Thread-safety: immutable after construction; all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvferry::engine {

class Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int32_t kUnk = 259;
  static constexpr int32_t kVocabSize = 260;

  // One token per byte, preceded by <bos> when add_bos.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = true) const;
  // Bytes of the byte tokens in order; specials (and ids out of range) are skipped.
  std::string Decode(std::span<const int32_t> token_ids) const;
  // The text of one token ("" for specials), for streaming.
  std::string TokenText(int32_t token_id) const;

  int32_t vocab_size() const { return kVocabSize; }
  int32_t bos_token_id() const { return kBos; }
  int32_t eos_token_id() const { return kEos; }
};

}  // namespace kvferry::engine
