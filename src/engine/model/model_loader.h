// Loading a model from what a user names with --model (docs/models.md):
//
//   "tiny", "small", "tiny-odd"   a built-in model: weights generated from its seed
//   DIR                           a Hugging Face model directory: config.json (+ optional
//                                 generation_config.json), model.safetensors or sharded
//                                 model-0000i-of-0000n.safetensors + model.safetensors.index.json
//   FILE.gguf                     llama.cpp's format (F32/F16/BF16 tensors)
//   FILE.safetensors              one safetensors file whose config is config.json beside it or
//                                 its __metadata__ "kvferry_config" (what SaveCheckpoint writes)
//
// Weights stay in their file's dtype and memory mapping; only GGUF Llama q/k projections (row
// order, tensor_slots.h) and small vectors are copied. Files over 256 MiB are read through once
// with progress on the log, so the first request does not pay for the page faults.
//
// Thread-safety: pure functions over the filesystem.
#pragma once

#include <string>

#include "engine/weights.h"
#include "kvferry/common/status.h"

namespace kvferry::engine {

enum class ModelFormat { kBuiltin, kHuggingFace, kGguf };

// What --model names, without loading anything. NotFound for a name that is neither a built-in
// nor an existing path.
StatusOr<ModelFormat> DetectModelFormat(const std::string& model);

// The weights (and config) of `model`. NotFound / InvalidArgument / DataLoss naming the file,
// field or tensor that is missing, refused or corrupt.
StatusOr<ModelWeights> LoadModelWeights(const std::string& model);

// Writes `weights` as one safetensors file with its config in __metadata__ "kvferry_config"
// (tensors as stored: F32 for the built-ins).
Status SaveCheckpoint(const ModelWeights& weights, const std::string& path);

}  // namespace kvferry::engine
