// ModelWeights (internal): the parameters of a Llama-family (or DeepSeek MLA) decoder as the
// kernels read them, and the built-in models' generated weights.
//
// The big matrices are WeightMatrix views ([out][in] row-major, as checkpoints store them) in
// their stored dtype (F32, F16, BF16): into a checkpoint's memory mapping (never copied), or
// into buffers generated for the built-ins. `storage` keeps whatever they point into alive, so
// a ModelWeights (and its copies, which share it) can be used as long as it exists. Small
// vectors (norms, biases) are f32 copies.
//
// Thread-safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/weight_matrix.h"
#include "kvferry/common/status.h"
#include "kvferry/engine/model_config.h"

namespace kvferry::engine {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  WeightMatrix q, k, v;          // [H*D][dim], [KV*D][dim], [KV*D][dim]
  WeightMatrix o;                // [dim][H*D]
  std::vector<float> ffn_norm;   // [dim]
  WeightMatrix gate, up;         // [F][dim] each
  WeightMatrix down;             // [dim][F]
  // Qwen2 (config.attention_bias): added to the projections; empty otherwise.
  std::vector<float> q_bias, k_bias, v_bias;  // [H*D], [KV*D], [KV*D]
  // Qwen3 (config.qk_norm): RMSNorm weights applied per head to q and k before RoPE.
  std::vector<float> q_norm, k_norm;  // [D] each

  // MLA (config.is_mla(); docs/engine.md): q is q_proj [H*D][dim] when q_lora_rank is 0, else
  // q_a [q_lora][dim], q_a_norm [q_lora], q_b [H*D][q_lora]; D = qk_nope + qk_rope, each head's
  // rows nope then rope. kv_a [kv_lora + qk_rope][dim] (latent rows, then the rope key's),
  // kv_a_norm [kv_lora], kv_b [H*(qk_nope + v_head_dim)][kv_lora] (each head's key rows, then its
  // value rows). o is [dim][H*v_head_dim]; k and v are empty.
  WeightMatrix q_a, q_b, kv_a, kv_b;
  std::vector<float> q_a_norm, kv_a_norm;

  // MoE layers (config.is_moe_layer; model_config.h, MoeShape): the router [E][dim], V3's
  // correction bias [E] (empty without), and expert e's SwiGLU MLP: expert_gate[e] and
  // expert_up[e] [Fe][dim], expert_down[e] [dim][Fe]. gate, up and down above are then the
  // shared experts' MLP [S*Fe][dim], [dim][S*Fe] (empty without shared experts).
  WeightMatrix router;
  std::vector<float> router_bias;
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;

  // The parts of the fused projections, in output order (their outputs land side by side).
  std::array<WeightMatrix, 3> qkv() const { return {q, k, v}; }
  std::array<WeightMatrix, 2> gate_up() const { return {gate, up}; }
};

struct ModelWeights {
  ModelConfig config;
  WeightMatrix embed;    // [V][dim]
  WeightMatrix lm_head;  // [V][dim]; the same view as embed when tied
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  // Owners of the bytes the views point into (generated buffers, file mappings).
  std::vector<std::shared_ptr<const void>> storage;

  // A buffer of `n` f32 values owned by this model (for generated or converted weights).
  float* AllocateF32(int64_t n);
};

// Deterministic weights from config.weight_seed: a counter-based hash of (seed, tensor, index),
// no state, so every run and machine gets the same bits. Any config works (biases and q/k norms
// too), so tests can make a random model of any supported architecture and shape. Scaled so that
// logits are spread (greedy output depends on the prompt); for byte-level vocabularies, the lm_head
// rows of non-printable bytes and specials are zero so the built-ins mostly emit printable ASCII.
StatusOr<ModelWeights> GenerateWeights(const ModelConfig& config);

}  // namespace kvferry::engine
