// ModelWeights (internal): the f32 parameters of a Llama-family decoder, fused for the kernels,
// and the two ways to get them: generated from the config's seed (built-ins), or loaded from a
// checkpoint file (docs/engine.md, "Checkpoint format": safetensors with F32 tensors, HF Llama
// names, and the config as JSON in the "__metadata__" entry "kvferry_config").
//
// All matrices are [out][in] row-major (as checkpoints store them). Fusions, which do not change
// any output value (each output element is its own dot product):
//   qkv     = rows of q_proj, then k_proj, then v_proj      [(H + 2 KV) * D][dim]
//   gate_up = rows of gate_proj, then up_proj               [2 F][dim]
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/engine/model_config.h"

namespace kvferry::engine {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> qkv;        // [(H + 2 KV) * D][dim]
  std::vector<float> o;          // [dim][H * D]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> gate_up;    // [2 F][dim]
  std::vector<float> down;       // [dim][F]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embed;  // [V][dim]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  std::vector<float> lm_head;     // [V][dim]; empty when tied (use embed)

  const float* lm_head_data() const { return lm_head.empty() ? embed.data() : lm_head.data(); }
};

// Deterministic weights from config.weight_seed: a counter-based hash of (seed, tensor, index),
// no state, so every run and machine gets the same bits. Scaled so that logits are spread
// (greedy output depends on the prompt); the lm_head rows of non-printable bytes and specials
// are zero so the built-ins mostly emit printable ASCII.
StatusOr<ModelWeights> GenerateWeights(const ModelConfig& config);

// Checkpoint I/O. Load: NotFound (no file), InvalidArgument / DataLoss naming the tensor or
// field that is missing, of the wrong dtype or shape, or outside the file.
StatusOr<ModelWeights> LoadCheckpoint(const std::string& path);
Status SaveCheckpoint(const ModelWeights& weights, const std::string& path);

}  // namespace kvferry::engine
