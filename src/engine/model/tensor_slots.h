// The table of tensors a decoder needs, per naming scheme (Hugging Face or GGUF), and binding a
// checkpoint's tensors to ModelWeights through it — checked completely before any compute.
//
//   Hugging Face                                     GGUF
//   model.embed_tokens.weight         [V][d]         token_embd.weight
//   model.layers.{i}.input_layernorm.weight  [d]     blk.{i}.attn_norm.weight
//     .self_attn.{q,k,v}_proj.weight  [H*D|KV*D][d]  blk.{i}.attn_{q,k,v}.weight
//     .self_attn.{q,k,v}_proj.bias    (Qwen2)        blk.{i}.attn_{q,k,v}.bias
//     .self_attn.{q,k}_norm.weight    [D] (Qwen3)    blk.{i}.attn_{q,k}_norm.weight
//     .self_attn.o_proj.weight        [d][H*D]       blk.{i}.attn_output.weight
//     .post_attention_layernorm.weight [d]           blk.{i}.ffn_norm.weight
//     .mlp.{gate,up}_proj.weight      [F][d]         blk.{i}.ffn_{gate,up}.weight
//     .mlp.down_proj.weight           [d][F]         blk.{i}.ffn_down.weight
//   model.norm.weight                 [d]            output_norm.weight
//   lm_head.weight (untied only)      [V][d]         output.weight
//   Mixture of experts (model_config.h, MoeShape), instead of the MLP in an MoE layer:
//     Qwen3-MoE, DeepSeek: model.layers.{i}.mlp.gate.weight [E][d]  blk.{i}.ffn_gate_inp.weight
//       .mlp.experts.{e}.{gate,up}_proj.weight [Fe][d]  blk.{i}.ffn_{gate,up}_exps.weight
//       [E][Fe][d] .mlp.experts.{e}.down_proj.weight [d][Fe]       blk.{i}.ffn_down_exps.weight
//       [E][d][Fe]
//     Mixtral: model.layers.{i}.block_sparse_moe.gate.weight, .block_sparse_moe.experts.{e}.
//       w1 (gate), w3 (up), w2 (down); the same GGUF names (architecture llama)
//     DeepSeek only: .mlp.gate.e_score_correction_bias [E] (V3), and the shared experts
//       .mlp.shared_experts.{gate,up,down}_proj.weight [S*Fe][d], [d][S*Fe]
//   DeepSeek (MLA, Hugging Face only), instead of q/k/v/o: model.layers.{i}.self_attn.
//     q_proj [H*(N+R)][d]  or  q_a_proj [Q][d], q_a_layernorm [Q], q_b_proj [H*(N+R)][Q];
//     kv_a_proj_with_mqa [L+R][d], kv_a_layernorm [L], kv_b_proj [H*(N+V)][L], o_proj [d][H*V]
//     (their rope rows are re-ordered after binding: deepseek_rope.h)
//
// Matrices are bound as views of the file's bytes in their stored dtype (F32, F16, BF16), except
// the q and k projections of a GGUF "llama" model: llama.cpp's converter interleaves each head's
// rows for its RoPE ([h][2][D/2] -> [h][D/2][2]), so they are copied once back into Hugging Face
// order (RotateHalfRows), which keeps the two formats bit-identical. Norms and biases are copied
// as f32.
//
// Thread-safety: pure functions (BindTensors writes only into `weights`).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "engine/weights.h"
#include "kvferry/formats/tensor.h"

namespace kvferry::engine {

enum class TensorNaming { kHuggingFace, kGguf };

struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;            // row-major, as the file must store it
  WeightMatrix* matrix = nullptr;        // big tensors: bound as a view (or a copy, below)
  std::vector<float>* vector = nullptr;  // small tensors: copied as f32
  int32_t interleaved_heads = 0;         // > 0: GGUF llama q/k rows to undo per head
  // A GGUF expert tensor [E][rows][cols]: bound as E views, one per expert (shape[0] of them).
  std::vector<WeightMatrix>* experts = nullptr;
};

// The tensors `weights->config` needs, pointing into `weights`.
std::vector<TensorSlot> TensorSlots(TensorNaming naming, ModelWeights* weights);

// Binds every slot to the tensor of that name in `tensors`. InvalidArgument naming the tensor
// for one that is missing, has another shape, or a dtype the engine does not compute (F32, F16,
// BF16 and kernels/quant_types.h's; the others are named); also for any tensor of the file no slot
// takes, unless it is in `ignored`. Copies go into weights->storage.
Status BindTensors(const std::vector<TensorSlot>& slots,
                   const std::vector<formats::TensorView>& tensors,
                   const std::set<std::string>& ignored, ModelWeights* weights);

// A copy of `m` with each head's rows reordered between llama.cpp's interleaved order and the
// rotate-half order: to_gguf false maps GGUF -> Hugging Face, true the other way. `m` has
// heads * head_dim rows.
WeightMatrix RotateHalfRows(const WeightMatrix& m, int32_t heads, bool to_gguf,
                            ModelWeights* owner);

}  // namespace kvferry::engine
