// ModelConfig: the shape of a Llama-family decoder (RMSNorm, RoPE, grouped-query attention,
// SwiGLU MLP, tied or untied embeddings), and the built-in configurations.
//
// Built-ins (weights generated deterministically from `weight_seed`, no files):
//   "tiny"  : byte-level vocab (256 bytes + 4 specials), dim 128, 4 layers, 4 heads / 2 KV heads.
//             The default; fast enough for unit tests.
//   "small" : same vocab, dim 512, 8 layers, 8 heads / 4 KV heads; for benchmarks.
//   "tiny-kv4" : tiny's vocab, dim 128, 2 layers, 8 heads / 4 KV heads, head dim 16, ffn 256: one
//             KV head per rank at tensor-parallel size 4 (tiny replicates its 2 there).
//   "tiny-odd" : vocab 263, dim 99, 3 layers, 6 heads / 2 KV heads, head dim 22, ffn 261: no
//             width a multiple of 8, so tests run the kernels' tail code in a real forward pass.
//   "tiny-mla" : tiny's vocab and width, 2 layers of multi-head latent attention (DeepSeek-V2/V3
//             style): 4 query heads, q_lora_rank 48, kv_lora_rank 32, qk_nope 16 + qk_rope 8,
//             v_head_dim 16, ffn 256. Its KV cache holds 40 values per token per layer.
//   "tiny-moe" : tiny's shape with Mixtral-style mixture-of-experts layers (2 of 8 experts of
//             width 128 per token).
//   "tiny-mla-moe" : tiny-mla's attention over 3 layers, DeepSeek-V3-style: a dense first layer,
//             then 4 of 16 experts (sigmoid, correction bias, groups, 2 shared experts).
// A checkpoint file (docs/engine.md, "Checkpoint format") carries its own ModelConfig.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::engine {

// RoPE frequency scaling (config.json "rope_scaling", GGUF rope.scaling.* / rope_freqs).
// Each frequency i of a head's d/2 is divided by a factor: 1 (none), `factor` (linear), Llama
// 3.1's smooth per-frequency blend (llama3), or given per frequency (a GGUF's rope_freqs).
struct RopeScaling {
  enum class Type : uint8_t { kNone, kLinear, kLlama3, kFactors, kYarn };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;          // llama3
  float high_freq_factor = 4.0f;         // llama3
  int32_t original_max_position = 8192;  // llama3, yarn
  std::vector<float> freq_factors;       // kFactors: head_dim / 2 of them
  // kYarn (DeepSeek-V2/V3): frequencies blended between `factor` and 1 over the band
  // [beta_slow, beta_fast] rotations in original_max_position; the softmax scale is multiplied
  // by YarnMscale(factor, mscale_all_dim)^2. `mscale` (the cos/sin factor) must equal
  // mscale_all_dim (their ratio, 1, is what the checkpoints use).
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 1.0f;
  float mscale_all_dim = 0.0f;
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

// The divisor of each of the head_dim / 2 RoPE frequencies, as f32 (the value a GGUF's
// rope_freqs tensor stores), so a model gives the same bits from either format.
std::vector<float> RopeFrequencyFactors(const RopeScaling& scaling, int32_t head_dim, float theta);

// DeepSeek's yarn_get_mscale: 0.1 * mscale * ln(factor) + 1 when factor > 1, else 1.
double YarnMscale(double factor, double mscale);

// Multi-head latent attention (DeepSeek-V2/V3; docs/engine.md, "Multi-head latent attention").
// kv_lora_rank > 0 makes every layer's attention MLA. Per token, kv_a_proj_with_mqa gives the
// latent c (kv_lora_rank, then kv_a_layernorm) and one rope key shared by all heads
// (qk_rope_head_dim); kv_b_proj expands c to each head's qk_nope_head_dim key and v_head_dim
// value. The query is q_proj(h), or q_b_proj(q_a_layernorm(q_a_proj(h))) with q_lora_rank > 0.
// The KV cache holds [c | rotated rope key] only: kv_lora_rank + qk_rope_head_dim values.
struct MlaShape {
  int32_t q_lora_rank = 0;  // 0: no low-rank query
  int32_t kv_lora_rank = 0;
  int32_t qk_nope_head_dim = 0;
  int32_t qk_rope_head_dim = 0;
  int32_t v_head_dim = 0;
  friend bool operator==(const MlaShape&, const MlaShape&) = default;
};

// Mixture-of-experts MLP layers (Mixtral, Qwen3-MoE, DeepSeek-V2/V3; docs/engine.md, "Mixture of
// experts"). num_experts > 0 makes every layer from first_dense_layers on an MoE layer: a router
// [num_experts][dim] scores the experts for each token, the experts_per_token best run (each a
// SwiGLU MLP of width expert_ffn_dim), and their outputs are summed, each times its router
// weight. Shared experts (DeepSeek) run for every token, as one SwiGLU MLP of width
// shared_experts * expert_ffn_dim. No capacity limit: a token's experts depend on the token only.
//   scores  = softmax(logits) (kSoftmax) or sigmoid(logits) (kSigmoid, DeepSeek-V3)
//   choice  = scores (+ the per-expert correction bias with correction_bias, V3's)
//   groups  (num_groups > 1): a group's score is the sum of its group_score_top best choice
//             values (V3 2, V2's group_limited_greedy 1); only the topk_groups best groups'
//             experts can be chosen
//   chosen  = the experts_per_token best choice values (ties: the lower expert id)
//   weight  = scores[chosen] (normalised to sum 1 with norm_topk_prob) * routed_scaling_factor
struct MoeShape {
  enum class Scoring : uint8_t { kSoftmax, kSigmoid };
  int32_t num_experts = 0;  // 0: every layer dense
  int32_t experts_per_token = 0;
  int32_t expert_ffn_dim = 0;
  int32_t shared_experts = 0;
  int32_t first_dense_layers = 0;  // DeepSeek's first_k_dense_replace (width ffn_dim)
  Scoring scoring = Scoring::kSoftmax;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  int32_t num_groups = 1;
  int32_t topk_groups = 1;
  int32_t group_score_top = 1;
  bool correction_bias = false;
  friend bool operator==(const MoeShape&, const MoeShape&) = default;
};

struct ModelConfig {
  std::string name;  // "tiny", "small", or the checkpoint's name
  // "llama" (Llama 2/3, Mistral, Mixtral, the built-ins), "qwen2", "qwen3", "qwen3moe" or
  // "deepseek": which optional parts the layers have (below) and, for GGUF, its tensor names and
  // Q/K row order.
  std::string architecture = "llama";
  int32_t vocab_size = 0;  // includes the special tokens
  int32_t hidden_dim = 0;  // model width
  int32_t num_layers = 0;
  int32_t num_heads = 0;     // query heads
  int32_t num_kv_heads = 0;  // divides num_heads (grouped-query attention)
  int32_t head_dim = 0;      // even (RoPE rotates pairs (i, i + head_dim/2))
  int32_t ffn_dim = 0;       // SwiGLU intermediate width
  int32_t max_position = 0;  // longest sequence the model accepts (max_model_len ceiling)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool tie_embeddings = false;         // lm_head = embed_tokens^T
  bool attention_bias = false;         // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;                // per-head RMSNorm of q and k before RoPE (Qwen3)
  int32_t bos_token_id = -1;           // -1: none
  std::vector<int32_t> eos_token_ids;  // any of them ends a request (unless ignore_eos)
  uint64_t weight_seed = 0;            // built-ins only: seed of the generated weights
  // Architecture "deepseek" only. There num_kv_heads is 1 (the latent, shared by every query
  // head) and head_dim is the query/key head dim, qk_nope_head_dim + qk_rope_head_dim.
  MlaShape mla;
  // Architectures "llama" (Mixtral), "qwen3moe" and "deepseek" may have MoE layers.
  MoeShape moe;

  bool is_mla() const { return mla.kv_lora_rank > 0; }
  bool is_moe() const { return moe.num_experts > 0; }
  bool is_moe_layer(int32_t layer) const { return is_moe() && layer >= moe.first_dense_layers; }
  // The width of layer `layer`'s dense SwiGLU MLP: ffn_dim, or in an MoE layer its shared
  // experts' (0 without).
  int64_t dense_ffn_dim(int32_t layer) const {
    return is_moe_layer(layer) ? int64_t{moe.shared_experts} * moe.expert_ffn_dim : ffn_dim;
  }
  // The width RoPE rotates: qk_rope_head_dim for MLA, head_dim otherwise.
  int32_t rope_dim() const { return is_mla() ? mla.qk_rope_head_dim : head_dim; }
  // Per-head width of the attention output (o_proj's input): v_head_dim for MLA, else head_dim.
  int32_t attn_out_head_dim() const { return is_mla() ? mla.v_head_dim : head_dim; }
  // Values the KV cache holds per token per layer per KV head: kv_lora_rank + qk_rope_head_dim
  // for MLA (one region per layer), head_dim otherwise (in each of K and V).
  int32_t kv_cache_head_dim() const {
    return is_mla() ? mla.kv_lora_rank + mla.qk_rope_head_dim : head_dim;
  }
  // 1/sqrt(head_dim), times YarnMscale(factor, mscale_all_dim)^2 under yarn rope scaling.
  float softmax_scale() const;

  // InvalidArgument naming the field when the shape is inconsistent.
  Status Validate() const;

  // Parameter count (embeddings counted once when tied).
  int64_t NumParameters() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// The built-in config `name` ("tiny" | "small" | "tiny-odd" | "tiny-kv4" | "tiny-mla" |
// "tiny-moe" | "tiny-mla-moe"); NotFound
// listing the known names otherwise.
StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name);

}  // namespace kvferry::engine
