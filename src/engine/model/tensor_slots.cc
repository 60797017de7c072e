#include "engine/model/tensor_slots.h"

#include <cstring>
#include <map>

#include "engine/kernels/quant_types.h"

namespace kvferry::engine {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Names {
  std::string embed, final_norm, lm_head;
  // Per layer, with {i} replaced by the layer index.
  std::string attn_norm, q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm, ffn_norm, gate, up,
      down;
};

const Names& NamesOf(TensorNaming naming) {
  static const Names kHf = {"model.embed_tokens.weight",
                            "model.norm.weight",
                            "lm_head.weight",
                            "model.layers.{i}.input_layernorm.weight",
                            "model.layers.{i}.self_attn.q_proj.weight",
                            "model.layers.{i}.self_attn.k_proj.weight",
                            "model.layers.{i}.self_attn.v_proj.weight",
                            "model.layers.{i}.self_attn.o_proj.weight",
                            "model.layers.{i}.self_attn.q_proj.bias",
                            "model.layers.{i}.self_attn.k_proj.bias",
                            "model.layers.{i}.self_attn.v_proj.bias",
                            "model.layers.{i}.self_attn.q_norm.weight",
                            "model.layers.{i}.self_attn.k_norm.weight",
                            "model.layers.{i}.post_attention_layernorm.weight",
                            "model.layers.{i}.mlp.gate_proj.weight",
                            "model.layers.{i}.mlp.up_proj.weight",
                            "model.layers.{i}.mlp.down_proj.weight"};
  static const Names kGguf = {
      "token_embd.weight",          "output_norm.weight",         "output.weight",
      "blk.{i}.attn_norm.weight",   "blk.{i}.attn_q.weight",      "blk.{i}.attn_k.weight",
      "blk.{i}.attn_v.weight",      "blk.{i}.attn_output.weight", "blk.{i}.attn_q.bias",
      "blk.{i}.attn_k.bias",        "blk.{i}.attn_v.bias",        "blk.{i}.attn_q_norm.weight",
      "blk.{i}.attn_k_norm.weight", "blk.{i}.ffn_norm.weight",    "blk.{i}.ffn_gate.weight",
      "blk.{i}.ffn_up.weight",      "blk.{i}.ffn_down.weight"};
  return naming == TensorNaming::kGguf ? kGguf : kHf;
}

std::string At(const std::string& pattern, int32_t layer) {
  std::string s = pattern;
  s.replace(s.find("{i}"), 3, std::to_string(layer));
  return s;
}

// A DeepSeek (MLA) layer's attention tensors, Hugging Face names (tensor_slots.h).
void MlaSlots(int32_t l, const ModelConfig& c, LayerWeights& lw, std::vector<TensorSlot>* out) {
  const MlaShape& m = c.mla;
  const int64_t d = c.hidden_dim, q = int64_t{c.num_heads} * c.head_dim;
  const std::string at = "model.layers." + std::to_string(l) + ".self_attn.";
  if (m.q_lora_rank > 0) {
    out->push_back({at + "q_a_proj.weight", {m.q_lora_rank, d}, &lw.q_a, nullptr, 0});
    out->push_back({at + "q_a_layernorm.weight", {m.q_lora_rank}, nullptr, &lw.q_a_norm, 0});
    out->push_back({at + "q_b_proj.weight", {q, m.q_lora_rank}, &lw.q_b, nullptr, 0});
  } else {
    out->push_back({at + "q_proj.weight", {q, d}, &lw.q, nullptr, 0});
  }
  out->push_back(
      {at + "kv_a_proj_with_mqa.weight", {c.kv_cache_head_dim(), d}, &lw.kv_a, nullptr, 0});
  out->push_back({at + "kv_a_layernorm.weight", {m.kv_lora_rank}, nullptr, &lw.kv_a_norm, 0});
  const int64_t kv_b_rows = int64_t{c.num_heads} * (m.qk_nope_head_dim + m.v_head_dim);
  out->push_back({at + "kv_b_proj.weight", {kv_b_rows, m.kv_lora_rank}, &lw.kv_b, nullptr, 0});
  out->push_back(
      {at + "o_proj.weight", {d, int64_t{c.num_heads} * m.v_head_dim}, &lw.o, nullptr, 0});
}

// An MoE layer's router and routed experts (and DeepSeek's correction bias), per naming.
void ExpertSlots(int32_t l, const ModelConfig& c, bool gguf, LayerWeights& lw,
                 std::vector<TensorSlot>* out) {
  const MoeShape& m = c.moe;
  const int64_t d = c.hidden_dim, f = m.expert_ffn_dim, n = m.num_experts;
  lw.expert_gate.resize(n);
  lw.expert_up.resize(n);
  lw.expert_down.resize(n);
  const std::string blk = "blk." + std::to_string(l) + ".";
  if (gguf) {
    out->push_back({blk + "ffn_gate_inp.weight", {n, d}, &lw.router, nullptr, 0});
    out->push_back({blk + "ffn_gate_exps.weight", {n, f, d}, nullptr, nullptr, 0, &lw.expert_gate});
    out->push_back({blk + "ffn_up_exps.weight", {n, f, d}, nullptr, nullptr, 0, &lw.expert_up});
    out->push_back({blk + "ffn_down_exps.weight", {n, d, f}, nullptr, nullptr, 0, &lw.expert_down});
    return;
  }
  const bool mixtral = c.architecture == "llama";
  const std::string at =
      "model.layers." + std::to_string(l) + (mixtral ? ".block_sparse_moe." : ".mlp.");
  out->push_back({at + "gate.weight", {n, d}, &lw.router, nullptr, 0});
  if (m.correction_bias) {
    out->push_back({at + "gate.e_score_correction_bias", {n}, nullptr, &lw.router_bias, 0});
  }
  for (int64_t e = 0; e < n; ++e) {
    const std::string ex = at + "experts." + std::to_string(e) + ".";
    out->push_back(
        {ex + (mixtral ? "w1" : "gate_proj") + ".weight", {f, d}, &lw.expert_gate[e], nullptr, 0});
    out->push_back(
        {ex + (mixtral ? "w3" : "up_proj") + ".weight", {f, d}, &lw.expert_up[e], nullptr, 0});
    out->push_back(
        {ex + (mixtral ? "w2" : "down_proj") + ".weight", {d, f}, &lw.expert_down[e], nullptr, 0});
  }
}

// Layer l's dense MLP, or in an MoE layer its shared experts (DeepSeek) and routed experts.
void MlpSlots(const Names& n, int32_t l, const ModelConfig& c, bool gguf, LayerWeights& lw,
              std::vector<TensorSlot>* out) {
  const int64_t d = c.hidden_dim, f = c.dense_ffn_dim(l);
  if (!c.is_moe_layer(l)) {
    out->push_back({At(n.gate, l), {f, d}, &lw.gate, nullptr, 0});
    out->push_back({At(n.up, l), {f, d}, &lw.up, nullptr, 0});
    out->push_back({At(n.down, l), {d, f}, &lw.down, nullptr, 0});
    return;
  }
  if (f > 0) {  // DeepSeek's shared experts (Hugging Face names only)
    const std::string at = "model.layers." + std::to_string(l) + ".mlp.shared_experts.";
    out->push_back({at + "gate_proj.weight", {f, d}, &lw.gate, nullptr, 0});
    out->push_back({at + "up_proj.weight", {f, d}, &lw.up, nullptr, 0});
    out->push_back({at + "down_proj.weight", {d, f}, &lw.down, nullptr, 0});
  }
  ExpertSlots(l, c, gguf, lw, out);
}

void LayerSlots(const Names& n, int32_t l, const ModelConfig& c, bool gguf, LayerWeights& lw,
                std::vector<TensorSlot>* out) {
  const int64_t d = c.hidden_dim, hd = c.head_dim;
  const int64_t q = c.num_heads * hd, kv = c.num_kv_heads * hd;
  const bool interleaved = gguf && c.architecture == "llama";
  out->push_back({At(n.attn_norm, l), {d}, nullptr, &lw.attn_norm, 0});
  if (c.is_mla()) {
    MlaSlots(l, c, lw, out);  // Hugging Face only: no GGUF file is read as deepseek
  } else {
    out->push_back({At(n.q, l), {q, d}, &lw.q, nullptr, interleaved ? c.num_heads : 0});
    out->push_back({At(n.k, l), {kv, d}, &lw.k, nullptr, interleaved ? c.num_kv_heads : 0});
    out->push_back({At(n.v, l), {kv, d}, &lw.v, nullptr, 0});
    out->push_back({At(n.o, l), {d, q}, &lw.o, nullptr, 0});
  }
  if (c.attention_bias) {
    out->push_back({At(n.q_bias, l), {q}, nullptr, &lw.q_bias, 0});
    out->push_back({At(n.k_bias, l), {kv}, nullptr, &lw.k_bias, 0});
    out->push_back({At(n.v_bias, l), {kv}, nullptr, &lw.v_bias, 0});
  }
  if (c.qk_norm) {
    out->push_back({At(n.q_norm, l), {hd}, nullptr, &lw.q_norm, 0});
    out->push_back({At(n.k_norm, l), {hd}, nullptr, &lw.k_norm, 0});
  }
  out->push_back({At(n.ffn_norm, l), {d}, nullptr, &lw.ffn_norm, 0});
  MlpSlots(n, l, c, gguf, lw, out);
}

// A quantized matrix (a computed type: RequireComputedDType has refused the others): whole
// blocks per row, and every block's scale finite.
Status CheckQuantized(const TensorSlot& slot, const formats::TensorView& t) {
  const std::string type(formats::DTypeName(t.dtype));
  if (slot.vector != nullptr) {
    return InvalidArgumentError("tensor '" + slot.name + "' in '" + t.file + "' is " + type +
                                "; norms and biases must be F32, F16 or BF16");
  }
  const int64_t cols = slot.shape.size() >= 2 ? slot.shape.back() : 1;
  if (cols % formats::DTypeBlockElements(t.dtype) != 0) {
    return InvalidArgumentError("tensor '" + slot.name + "' in '" + t.file + "': rows of " +
                                std::to_string(cols) + " values are not whole " + type + " blocks");
  }
  const WeightMatrix m{t.dtype, t.data, t.elements() / cols, cols};
  if (const int64_t bad = FirstNonFiniteBlockScale(m); bad >= 0) {
    return InvalidArgumentError("tensor '" + slot.name + "' in '" + t.file + "': " + type +
                                " block " + std::to_string(bad) + " has a NaN or infinite scale");
  }
  return Status::Ok();
}

// The dtypes the engine computes: F32, F16, BF16 and the quantized types of
// kernels/quant_types.h; any other is refused, naming it and the list.
Status RequireComputedDType(const formats::TensorView& t) {
  using formats::DType;
  if (t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16 ||
      kernels::IsComputedQuantType(t.dtype)) {
    return Status::Ok();
  }
  std::string expected = "F32, F16, BF16";
  for (DType d : kernels::ComputedQuantTypes()) expected += ", " + std::string(DTypeName(d));
  return InvalidArgumentError("tensor '" + t.name + "' in '" + t.file + "' has dtype " +
                              std::string(DTypeName(t.dtype)) + "; expected one of " + expected);
}

Status BindOne(const TensorSlot& slot, const formats::TensorView& t, ModelWeights* w) {
  KVF_RETURN_IF_ERROR(RequireComputedDType(t));
  if (t.shape == slot.shape && kernels::IsComputedQuantType(t.dtype)) {
    KVF_RETURN_IF_ERROR(CheckQuantized(slot, t));
  }
  if (t.shape != slot.shape) {
    return InvalidArgumentError("tensor '" + slot.name + "' in '" + t.file + "' has shape " +
                                ShapeString(t.shape) + ", the config needs " +
                                ShapeString(slot.shape));
  }
  if (slot.vector != nullptr) {
    slot.vector->resize(static_cast<size_t>(t.elements()));
    return formats::ReadAsF32(t, *slot.vector);
  }
  const int64_t cols = slot.shape.size() >= 2 ? slot.shape.back() : 1;
  if (slot.experts != nullptr) {  // [E][rows][cols]: expert e is rows [e * rows, (e + 1) * rows)
    const WeightMatrix all{t.dtype, t.data, slot.shape[0] * slot.shape[1], cols};
    for (int64_t e = 0; e < slot.shape[0]; ++e) {
      (*slot.experts)[e] = RowSlice(all, e * slot.shape[1], slot.shape[1]);
    }
    return Status::Ok();
  }
  *slot.matrix = WeightMatrix{t.dtype, t.data, slot.shape[0], cols};
  if (slot.interleaved_heads > 0) {
    *slot.matrix = RotateHalfRows(*slot.matrix, slot.interleaved_heads, false, w);
  }
  return Status::Ok();
}

}  // namespace

std::vector<TensorSlot> TensorSlots(TensorNaming naming, ModelWeights* w) {
  const ModelConfig& c = w->config;
  const Names& n = NamesOf(naming);
  const int64_t d = c.hidden_dim, v = c.vocab_size;
  std::vector<TensorSlot> out;
  out.push_back({n.embed, {v, d}, &w->embed, nullptr, 0});
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerSlots(n, l, c, naming == TensorNaming::kGguf, w->layers[l], &out);
  }
  out.push_back({n.final_norm, {d}, nullptr, &w->final_norm, 0});
  if (!c.tie_embeddings) out.push_back({n.lm_head, {v, d}, &w->lm_head, nullptr, 0});
  return out;
}

Status BindTensors(const std::vector<TensorSlot>& slots,
                   const std::vector<formats::TensorView>& tensors,
                   const std::set<std::string>& ignored, ModelWeights* w) {
  std::map<std::string, const formats::TensorView*> by_name;
  for (const formats::TensorView& t : tensors) by_name[t.name] = &t;
  for (const TensorSlot& slot : slots) {
    const auto it = by_name.find(slot.name);
    if (it == by_name.end()) {
      return InvalidArgumentError("checkpoint: missing tensor '" + slot.name + "'");
    }
    KVF_RETURN_IF_ERROR(BindOne(slot, *it->second, w));
    by_name.erase(it);
  }
  for (const auto& [name, view] : by_name) {
    if (ignored.count(name) == 0) {
      return InvalidArgumentError("checkpoint: unexpected tensor '" + name + "' in '" + view->file +
                                  "' (the config of a " + w->config.architecture +
                                  " model has no place for it)");
    }
  }
  if (w->config.tie_embeddings) w->lm_head = w->embed;
  return Status::Ok();
}

WeightMatrix RotateHalfRows(const WeightMatrix& m, int32_t heads, bool to_gguf,
                            ModelWeights* owner) {
  const int64_t head_dim = m.rows / heads, half = head_dim / 2;
  const int64_t row_bytes = m.bytes_of(m.cols);
  auto buffer = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(m.rows * row_bytes));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t rotate_half = h * head_dim + part * half + j;  // Hugging Face order
        const int64_t interleaved = h * head_dim + 2 * j + part;     // llama.cpp's order
        const int64_t src = to_gguf ? rotate_half : interleaved;
        const int64_t dst = to_gguf ? interleaved : rotate_half;
        std::memcpy(buffer->data() + dst * row_bytes, m.row(src), static_cast<size_t>(row_bytes));
      }
    }
  }
  WeightMatrix out = m;
  out.data = buffer->data();
  owner->storage.push_back(std::move(buffer));
  return out;
}

}  // namespace kvferry::engine
