// ReferenceModel (test-only): a plain float64 forward pass of a Llama-family decoder, written
// from the model definition, to check the engine against something it shares no code with.
//
// It shares only the weights (ModelWeights, converted once to double and unfused into
// q/k/v and gate/up) — no kernels, no paging, no batching, no fixed reduction order. One
// sequence at a time, one position after the other; each layer keeps the sequence's keys and
// values in a plain array indexed [position][kv head][dim], so a position can only attend to
// what came before it. Per position p and layer:
//   h = RMSNorm(x) * attn_norm;  q, k, v = h Wq^T, h Wk^T, h Wv^T
//   q, k rotated by RoPE "rotate half": for i < D/2, (x_i, x_{i+D/2}) by angle p * theta^(-2i/D)
//   head j attends with kv head j / (H / KV): softmax_t(q·k_t / sqrt(D)), t = 0..p; x += o Wo^T
//   h = RMSNorm(x) * ffn_norm;  x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
// and logits = (RMSNorm(x) * final_norm) lm_head^T (lm_head = embed when tied).
//
// Architectures: q/k/v biases (Qwen2) in ProjectQkv; per-head q/k RMSNorm (Qwen3) between
// ProjectQkv and RoPE; rope scaling (linear, llama3, per-frequency factors) in
// RopeInverseFrequencies (yarn too). Multi-head latent attention (DeepSeek, config.is_mla())
// in reference_mla.cc, in its expanded form, as the model defines it (the engine absorbs):
//   q = q_proj(h) or q_b(RMSNorm(q_a(h)) * q_a_norm), per head [q_nope | q_rope]
//   [c | k_rope] = kv_a(h); c = RMSNorm(c) * kv_a_norm; k_rope = RoPE(k_rope) (one, shared)
//   per head j and position t: k = [kv_b_key[j] c_t | k_rope_t], v = kv_b_value[j] c_t
//   softmax_t(q·k * softmax_scale) over t = 0..p; x += o Wo^T
// where SequenceKv keeps only c and k_rope per position, as the engine's cache does.
//
// Thread-safety: immutable after Create(); Logits() is const and may run concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/weights.h"
#include "kvferry/common/status.h"

namespace kvferry::engine {

// One decoder layer's weights in double, unfused, [out][in] row-major.
struct ReferenceLayer {
  std::vector<double> attn_norm;               // [dim]
  std::vector<double> wq, wk, wv;              // [H*D][dim], [KV*D][dim], [KV*D][dim]
  std::vector<double> wo;                      // [dim][H*D]
  std::vector<double> ffn_norm;                // [dim]
  std::vector<double> w_gate, w_up;            // [F][dim] each
  std::vector<double> w_down;                  // [dim][F]
  std::vector<double> q_bias, k_bias, v_bias;  // Qwen2 (attention_bias)
  std::vector<double> q_norm, k_norm;          // Qwen3 (qk_norm): [D] each
  // MLA (weights.h's shapes); wq holds q_proj when q_lora_rank is 0.
  std::vector<double> wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b;
};

class ReferenceModel {
 public:
  // Copies `weights` into double precision. InvalidArgument when the config is inconsistent
  // or a tensor has the wrong size.
  static StatusOr<ReferenceModel> Create(const ModelWeights& weights);

  // Logits of every position of `tokens` (one sequence starting at position 0): [n][vocab].
  // InvalidArgument for an empty sequence, a token outside the vocabulary, or more tokens than
  // max_position.
  StatusOr<std::vector<std::vector<double>>> Logits(std::span<const int32_t> tokens) const;

  // Logits of the last position only (the same values as Logits().back()).
  StatusOr<std::vector<double>> LastLogits(std::span<const int32_t> tokens) const;

  const ModelConfig& config() const { return config_; }

 private:
  // One layer's keys and values of the positions seen so far: [position][kv head][D].
  // MLA: k holds the latents [position][kv_lora_rank], v the rope keys [position][rope dim].
  struct SequenceKv {
    std::vector<double> k, v;
  };

  ReferenceModel() = default;

  Status CheckTokens(std::span<const int32_t> tokens) const;
  // Runs the sequence; fills logits of every position when `all`, else of the last only.
  std::vector<std::vector<double>> Run(std::span<const int32_t> tokens, bool all) const;
  void AttentionBlock(const ReferenceLayer& layer, int32_t pos, SequenceKv& kv,
                      std::vector<double>& x) const;
  // MLA's attention (reference_mla.cc).
  void MlaAttentionBlock(const ReferenceLayer& layer, int32_t pos, SequenceKv& kv,
                         std::vector<double>& x) const;
  // MLA's weights of one layer, in double (reference_mla.cc).
  static Status LoadMla(const ModelConfig& c, const LayerWeights& lw, const std::string& at,
                        ReferenceLayer& layer);
  void MlpBlock(const ReferenceLayer& layer, std::vector<double>& x) const;
  std::vector<double> Head(const std::vector<double>& x) const;

  ModelConfig config_;
  std::vector<double> embed_;  // [V][dim]
  std::vector<ReferenceLayer> layers_;
  std::vector<double> final_norm_;  // [dim]
  std::vector<double> lm_head_;     // [V][dim] (a copy of embed_ when tied)
  std::vector<double> inv_freq_;    // [D/2] RoPE inverse frequencies
};

}  // namespace kvferry::engine
