// A GGUF file's tokenizer.* keys as the tokenizer library's plain struct, and back: the glue
// between the formats and tokenizer layers, which know nothing of each other.
//
// Thread-safety: pure functions.
#pragma once

#include "kvferry/common/status.h"
#include "kvferry/formats/gguf_metadata.h"
#include "kvferry/formats/gguf_writer.h"
#include "kvferry/tokenizer/gguf_metadata.h"

namespace kvferry::engine {

// tokenizer.ggml.* and tokenizer.chat_template. InvalidArgument naming a key of the wrong type;
// NotFound when tokenizer.ggml.model or tokenizer.ggml.tokens is absent.
StatusOr<tokenizer::GgufTokenizerMetadata> ReadGgufTokenizer(const formats::GgufMetadata& m);

// The same keys into a writer (what llama.cpp's converter writes).
Status AddGgufTokenizer(const tokenizer::GgufTokenizerMetadata& t, formats::GgufWriter* w);

// A Hugging Face tokenizer.json (and tokenizer_config.json, "" when absent) as GGUF tokenizer
// keys, its vocabulary padded to `vocab_size` entries the way llama.cpp's converter pads a
// checkpoint whose embedding has more rows than the tokenizer has tokens ([PAD<id>], unused).
StatusOr<tokenizer::GgufTokenizerMetadata> GgufTokenizerFromHuggingFace(
    std::string_view tokenizer_json, std::string_view tokenizer_config, int32_t vocab_size);

}  // namespace kvferry::engine
