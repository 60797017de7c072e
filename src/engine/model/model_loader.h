// Loading a model from what a user names with --model (docs/models.md):
//
//   "tiny", "small", "tiny-odd", "tiny-kv4"
//                                 a built-in model: weights generated from its seed
//   DIR                           a Hugging Face model directory: config.json (+ optional
//                                 generation_config.json), model.safetensors or sharded
//                                 model-0000i-of-0000n.safetensors + model.safetensors.index.json
//   FILE.gguf                     llama.cpp's format (F32/F16/BF16 tensors)
//   FILE.safetensors              one safetensors file whose config is config.json beside it or
//                                 its __metadata__ "kvferry_config" (what SaveCheckpoint writes)
//
// The tokenizer comes with the model: the built-in byte vocabulary, tokenizer.json (+
// tokenizer_config.json) of the directory (or beside the file), or the GGUF's tokenizer.* keys.
// Weights stay in their file's dtype and memory mapping; only GGUF Llama q/k projections (row
// order, tensor_slots.h) and small vectors are copied. Files over 256 MiB are read through once
// with progress on the log, so the first request does not pay for the page faults.
//
// Thread-safety: pure functions over the filesystem.
#pragma once

#include <string>

#include "engine/weights.h"
#include "kvferry/common/status.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::engine {

enum class ModelFormat { kBuiltin, kHuggingFace, kGguf };

// What --model names, without loading anything. NotFound for a name that is neither a built-in
// nor an existing path.
StatusOr<ModelFormat> DetectModelFormat(const std::string& model);

// The weights (and config) of `model`. NotFound / InvalidArgument / DataLoss naming the file,
// field or tensor that is missing, refused or corrupt.
StatusOr<ModelWeights> LoadModelWeights(const std::string& model);

struct Model {
  ModelWeights weights;  // config.eos_token_ids also holds the tokenizer's eos ids
  tokenizer::Tokenizer tokenizer;
};

// The weights and the tokenizer: the model's own, or `tokenizer` when not empty (a path to a
// directory or file with a tokenizer.json, or "byte-level"). InvalidArgument also when the
// tokenizer has more ids than the model's embedding has rows.
StatusOr<Model> LoadModel(const std::string& model, const std::string& tokenizer = "");

// Writes `weights` as one safetensors file with its config in __metadata__ "kvferry_config"
// (tensors as stored: F32 for the built-ins).
Status SaveCheckpoint(const ModelWeights& weights, const std::string& path);

}  // namespace kvferry::engine
