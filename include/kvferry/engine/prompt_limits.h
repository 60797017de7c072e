// Prompt limits: the one check of a prompt against a model's vocabulary and context length (and
// of its text's bytes, before tokenizing), and of a request's length against the context, with
// the one wording clients read (vLLM's for the
// context length, so a client written against vLLM sees the message it knows).
//
// Engine::AddRequest refuses any prompt CheckPrompt refuses, whoever the caller. The HTTP server
// (src/server) calls the same functions before it submits, so its 400 names the request's field
// and comes before max_tokens is defaulted from the room the prompt leaves.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvferry/common/status.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::engine {

// InvalidArgument when a token id is outside [0, vocab_size), or when the prompt leaves no room
// for one generated token (max_model_len tokens or more).
Status CheckPrompt(std::span<const int32_t> prompt_token_ids, int32_t vocab_size,
                   int32_t max_model_len);

// InvalidArgument when the prompt and max_tokens together exceed max_model_len. The engine
// itself accepts such a request and stops it at max_model_len (finish reason "length"); an
// OpenAI server refuses it, as vLLM does.
Status CheckRequestLength(int64_t num_prompt_tokens, int64_t max_tokens, int32_t max_model_len);

// The most bytes of text that can fit max_model_len tokens of `tok`: no token stands for more
// than the longest TokenBytes, so a longer text needs more tokens than the context holds. Four
// times that, so that a normalizer dropping characters before the model splits the text never
// refuses a text that fits (byte-level BPE and SentencePiece drop none). Walks the vocabulary
// (48 ms for Llama 3's 128k): compute it once.
size_t MaxPromptBytes(const tokenizer::Tokenizer& tok, int32_t max_model_len);

// InvalidArgument, in the context-length wording, for a text of more than `max_bytes`
// (MaxPromptBytes): refused before the tokenizer runs.
Status CheckPromptBytes(size_t bytes, size_t max_bytes, int32_t max_model_len);

}  // namespace kvferry::engine
