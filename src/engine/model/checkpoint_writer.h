// Writing a model's weights as checkpoints: a Hugging Face directory, a GGUF file, or one
// kvferry safetensors file (config in its metadata). Tensors take the names of tensor_slots.h
// and the dtype asked for (F32, F16 or BF16, values rounded to nearest even; GGUF files also
// the quantized types, gguf_file_type.h); GGUF Llama q/k
// rows are interleaved the way llama.cpp's converter does, so llama.cpp reads the file right.
// Used by the tests, `kvferry synth-model` and the benchmarks that need a checkpoint on disk.
//
// Thread-safety: pure functions over the filesystem.
#pragma once

#include <functional>
#include <string>

#include "engine/model/gguf_file_type.h"
#include "engine/weights.h"
#include "kvferry/formats/dtype.h"
#include "kvferry/formats/gguf_writer.h"

namespace kvferry::engine {

// config.json and model.safetensors (or `shards` shards with the index) into existing `dir`.
Status WriteHfCheckpoint(const ModelWeights& weights, const std::string& dir, formats::DType dtype,
                         int shards = 1);

// A GGUF file; `add_tokenizer` adds the tokenizer.* keys (the model keys are added here). Every
// matrix in `dtype`: F32, F16, BF16 or a quantized type the engine computes (ggml's reference
// quantizer; rows must be whole blocks).
Status WriteGgufCheckpoint(const ModelWeights& weights, const std::string& path,
                           formats::DType dtype,
                           const std::function<Status(formats::GgufWriter*)>& add_tokenizer);

// A quantized GGUF file of file type `type`: each matrix in the type gguf_file_type.h assigns
// it, as llama-quantize does, and general.file_type set.
Status WriteGgufCheckpoint(const ModelWeights& weights, const std::string& path,
                           const GgufFileType& type,
                           const std::function<Status(formats::GgufWriter*)>& add_tokenizer);

}  // namespace kvferry::engine
