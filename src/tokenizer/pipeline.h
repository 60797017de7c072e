// Pipeline: what a Tokenizer holds, the stages of Hugging Face's pipeline and the special-token
// configuration, filled by a loader (hf_loader.cc, gguf_loader.cc, builtin.cc) and completed by
// Tokenizer::Assemble (tokenizer.cc).
//
// Internal to src/tokenizer. Thread-safety: immutable once assembled.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"

namespace kvferry::tokenizer {

struct Pipeline {
  // Stages; all but the model may be null (the stage does nothing; a null decoder joins the
  // token strings with spaces, as tokenizers does).
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  // Encode accepts any bytes, not only UTF-8 (the built-in byte vocabulary).
  bool any_bytes = false;

  // Set by the loader.
  SpecialTokens special_strings;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  std::optional<int32_t> pad_id;
  std::optional<int32_t> unk_id;
  std::string chat_template;

  // Derived by Tokenizer::Assemble.
  int32_t vocab_size = 0;
  std::vector<bool> is_special;  // by id
  std::vector<int32_t> special_ids;
  bool add_bos = false;
};

}  // namespace kvferry::tokenizer
