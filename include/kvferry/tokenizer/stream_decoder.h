// StreamDecoder: incremental detokenization of generated ids, one id at a time.
//
// Add(id) returns the text that has become final: never part of a UTF-8 character (bytes of an
// unfinished character, from byte-level or <0xNN> byte-fallback tokens, are held until the
// character completes), and with SentencePiece's leading-space rule applied as for the whole
// text (only the text's first token loses its "▁"). Finish() returns what is still held, an
// unfinished character as U+FFFD. The concatenation of everything returned equals
// tokenizer.Decode(all ids, skip_special_tokens).
//
// It decodes a short window of recent ids with each call (the ids since the last output and the
// ones before it, for context), so a call costs O(window), not O(text).
//
// Thread-safety: one StreamDecoder per sequence, used by one thread at a time; the Tokenizer it
// reads must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::tokenizer {

class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens);

  // The newly final text after `id` (often "", never a partial character).
  std::string Add(int32_t id);
  // Everything still held, at the end of the sequence.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // ids from the context start on
  size_t read_ = 0;              // window_[0, read_) is context already output
  bool at_start_ = true;         // window_[0] is the text's first id
};

}  // namespace kvferry::tokenizer
