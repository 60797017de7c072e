// The tokenizer metadata of a GGUF file (llama.cpp's model format), as a plain struct, so that
// this library needs no GGUF reader: whoever reads the file fills it from the keys named below
// and passes it to Tokenizer::FromGguf. ExportGgufMetadata goes the other way, from a Hugging
// Face tokenizer.json, the way llama.cpp's convert_hf_to_gguf.py fills these keys.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::tokenizer {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens (<s>, <|im_start|>)
  kUserDefined = 4,  // added tokens that are not special
  kUnused = 5,       // fillers for ids the vocabulary lacks
  kByte = 6,         // SentencePiece <0xNN> byte tokens
};

struct GgufTokenizerMetadata {
  // tokenizer.ggml.model: "gpt2" (byte-level BPE: Llama 3, Qwen2/3) or "llama" (SentencePiece
  // BPE with byte fallback: Llama 2, Mistral). Others are refused.
  std::string model;
  // tokenizer.ggml.pre, the pre-tokenizer of a "gpt2" model: "llama-bpe" (also "llama3",
  // "llama-v3"), "qwen2" (also "deepseek-r1-qwen"), "gpt-2", "default" or empty.
  std::string pre;
  std::vector<std::string> tokens;       // tokenizer.ggml.tokens, index = id
  std::vector<float> scores;             // tokenizer.ggml.scores (SentencePiece), may be empty
  std::vector<int32_t> token_types;      // tokenizer.ggml.token_type (GgufTokenType), may be empty
  std::vector<std::string> merges;       // tokenizer.ggml.merges, "a b", in rank order
  std::optional<int32_t> bos_token_id;   // tokenizer.ggml.bos_token_id
  std::optional<int32_t> eos_token_id;   // tokenizer.ggml.eos_token_id
  std::optional<int32_t> eot_token_id;   // tokenizer.ggml.eot_token_id
  std::optional<int32_t> eom_token_id;   // tokenizer.ggml.eom_token_id
  std::optional<int32_t> unk_token_id;   // tokenizer.ggml.unknown_token_id
  std::optional<int32_t> pad_token_id;   // tokenizer.ggml.padding_token_id
  std::optional<bool> add_bos_token;     // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos_token;     // tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix ("llama" models)
  std::string chat_template;             // tokenizer.chat_template
};

// The GGUF tokenizer metadata equivalent to a Hugging Face tokenizer.json (+ optional
// tokenizer_config.json): vocabulary in id order (holes filled with "[PAD<id>]", kUnused),
// token types (special added tokens kControl, other added tokens kUserDefined, <0xNN> kByte in
// "llama" models), merges as "a b", the pre type recognized from the pre-tokenizer's regex,
// bos/eos/unk/pad ids, add_bos/add_eos as the post-processor does, the chat template. For
// "llama" models the scores are -(rank of the first merge that makes the token), which orders
// SentencePiece's merges as the file's merge list does.
//
// Tokenizer::FromGguf of the result encodes as Tokenizer::FromHuggingFaceJson of the input.
// kUnimplemented for pipelines GGUF cannot express (an unknown pre-tokenizer regex, a
// normalizer other than the one its pre type implies).
StatusOr<GgufTokenizerMetadata> ExportGgufMetadata(std::string_view tokenizer_json,
                                                   std::string_view tokenizer_config_json = {});

}  // namespace kvferry::tokenizer
