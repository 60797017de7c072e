// The model config of a GGUF file (llama.cpp's format): its metadata keys to ModelConfig, and
// back (the writer the tests and `kvferry synth-model` use).
//
// general.architecture "llama" (Llama 2/3, Mistral), "qwen2" or "qwen3"; the shape from
// {arch}.embedding_length, block_count, feed_forward_length, attention.head_count,
// attention.head_count_kv, attention.key_length (head dim; default width / heads),
// context_length, rope.freq_base, attention.layer_norm_rms_epsilon; rope.scaling.type linear
// with rope.scaling.factor, or a rope_freqs.weight tensor (how llama.cpp's converter stores
// Llama 3.1's per-frequency factors); vocab = token_embd.weight's rows; bos/eos from
// tokenizer.ggml.*; tied embeddings when there is no output.weight.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "kvferry/common/status.h"
#include "kvferry/engine/model_config.h"
#include "kvferry/formats/gguf.h"
#include "kvferry/formats/gguf_writer.h"

namespace kvferry::engine {

// InvalidArgument naming the key for an unsupported architecture or rope scaling, a missing or
// ill-typed key, or an inconsistent shape.
StatusOr<ModelConfig> ModelConfigFromGguf(const formats::GgufFile& file, std::string name);

// Adds the model keys for `c` (general.architecture, {arch}.*; not the tokenizer's) to `w`, and
// rope_freqs.weight when `c` has per-frequency rope factors.
Status AddGgufModelMetadata(const ModelConfig& c, formats::GgufWriter* w);

}  // namespace kvferry::engine
