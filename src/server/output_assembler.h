// OutputAssembler (server-internal): turns a request's engine outputs into the choice deltas the
// client sees — detokenized text (tokenizer::StreamDecoder: only whole characters, SentencePiece
// spaces as in the whole text, special tokens skipped), logprob
// entries, token ids — and applies stop strings (the text is cut before the stop string and the
// request finishes with "stop"; the caller then aborts the engine request).
//
// Thread-safety: not thread-safe; one per request, used by the thread serving it.
#pragma once

#include <string>
#include <vector>

#include "kvferry/engine/engine.h"
#include "kvferry/server/openai_protocol.h"
#include "kvferry/tokenizer/stream_decoder.h"

namespace kvferry::server {

class OutputAssembler {
 public:
  OutputAssembler(const tokenizer::Tokenizer* tokenizer, bool logprobs,
                  std::vector<std::string> stop);

  // Adds one engine output; returns what to send for it. When the output is the last one (or a
  // stop string matched) the delta carries everything still held back and its finish_reason.
  ChoiceOutput Add(const engine::RequestOutput& output);
  // P's answer to a prefill-only request that a D continues (docs/serving.md, "kvferry proxy"):
  // `output` (finished only because P generates one token) is added as a stream adds a first
  // token that more tokens follow — text held back exactly as a colocated stream holds it (an
  // incomplete UTF-8 sequence, a possible stop-string prefix), since D's assembler, holding the
  // same token, sends the rest. The answer then ends with the output's finish_reason (or "stop"
  // when a stop string matched: then it is the whole answer).
  ChoiceOutput AddAsStreamHead(const engine::RequestOutput& output);

  bool finished() const { return finished_; }
  bool stopped_by_string() const { return stopped_by_string_; }
  int32_t num_generated_tokens() const { return num_generated_tokens_; }
  // The whole answer so far (for non-streaming responses).
  const ChoiceOutput& total() const { return total_; }

 private:
  const tokenizer::Tokenizer* tokenizer_;
  tokenizer::StreamDecoder decoder_;  // the text: never a partial character, specials skipped
  const bool logprobs_;
  const std::vector<std::string> stop_;
  size_t max_stop_len_ = 0;
  std::string pending_;    // decoded bytes not yet sent
  std::string generated_;  // all generated text (for stop matching)
  size_t sent_bytes_ = 0;  // bytes of generated_ already sent
  int32_t num_generated_tokens_ = 0;
  bool finished_ = false;
  bool stopped_by_string_ = false;
  ChoiceOutput total_;
};

}  // namespace kvferry::server
