#include "engine/model/gguf_config.h"

#include <cstring>

namespace kvferry::engine {
namespace {

using formats::GgufMetadata;
using formats::GgufValue;
using formats::GgufValueType;

StatusOr<int32_t> IntKey(const GgufMetadata& m, const std::string& key) {
  KVF_ASSIGN_OR_RETURN(int64_t v, m.GetInt(key));
  if (v < 0 || v > INT32_MAX) return InvalidArgumentError("GGUF: " + key + " is out of range");
  return static_cast<int32_t>(v);
}

// An optional integer key (`dflt` when absent).
StatusOr<int32_t> IntKeyOr(const GgufMetadata& m, const std::string& key, int32_t dflt) {
  if (m.Find(key) == nullptr) return dflt;
  return IntKey(m, key);
}

StatusOr<float> FloatKeyOr(const GgufMetadata& m, const std::string& key, float dflt) {
  if (m.Find(key) == nullptr) return dflt;
  KVF_ASSIGN_OR_RETURN(double v, m.GetFloat(key));
  return static_cast<float>(v);
}

Status GgufShape(const GgufMetadata& m, const std::string& a, ModelConfig* c) {
  KVF_ASSIGN_OR_RETURN(c->hidden_dim, IntKey(m, a + ".embedding_length"));
  KVF_ASSIGN_OR_RETURN(c->num_layers, IntKey(m, a + ".block_count"));
  KVF_ASSIGN_OR_RETURN(c->ffn_dim, IntKey(m, a + ".feed_forward_length"));
  KVF_ASSIGN_OR_RETURN(c->num_heads, IntKey(m, a + ".attention.head_count"));
  if (c->num_heads <= 0) return InvalidArgumentError("GGUF: " + a + ".attention.head_count is 0");
  KVF_ASSIGN_OR_RETURN(c->num_kv_heads, IntKeyOr(m, a + ".attention.head_count_kv", c->num_heads));
  KVF_ASSIGN_OR_RETURN(c->head_dim,
                       IntKeyOr(m, a + ".attention.key_length", c->hidden_dim / c->num_heads));
  KVF_ASSIGN_OR_RETURN(c->max_position, IntKeyOr(m, a + ".context_length", 2048));
  KVF_ASSIGN_OR_RETURN(c->rope_theta, FloatKeyOr(m, a + ".rope.freq_base", 10000.0f));
  KVF_ASSIGN_OR_RETURN(c->rms_norm_eps,
                       FloatKeyOr(m, a + ".attention.layer_norm_rms_epsilon", 1e-5f));
  return Status::Ok();
}

Status GgufRopeScaling(const formats::GgufFile& file, const std::string& a, ModelConfig* c) {
  const GgufMetadata& m = file.metadata();
  if (const formats::TensorView* freqs = file.Find("rope_freqs.weight")) {
    c->rope_scaling.type = RopeScaling::Type::kFactors;
    c->rope_scaling.freq_factors.resize(static_cast<size_t>(freqs->elements()));
    return formats::ReadAsF32(*freqs, c->rope_scaling.freq_factors);
  }
  const std::string key = a + ".rope.scaling.type";
  if (m.Find(key) == nullptr) return Status::Ok();
  StatusOr<std::string> type = m.GetString(key);
  if (!type.ok()) return type.status();
  if (*type == "none") return Status::Ok();
  if (*type != "linear") {
    return InvalidArgumentError("GGUF: " + key + " '" + *type +
                                "' is not supported (supported: linear, and llama3 factors as "
                                "rope_freqs.weight)");
  }
  c->rope_scaling.type = RopeScaling::Type::kLinear;
  KVF_ASSIGN_OR_RETURN(c->rope_scaling.factor, FloatKeyOr(m, a + ".rope.scaling.factor", 1.0f));
  return Status::Ok();
}

Status Tokens(const GgufMetadata& m, ModelConfig* c) {
  KVF_ASSIGN_OR_RETURN(c->bos_token_id, IntKeyOr(m, "tokenizer.ggml.bos_token_id", -1));
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    KVF_ASSIGN_OR_RETURN(int32_t id, IntKeyOr(m, key, -1));
    if (id >= 0 &&
        std::find(c->eos_token_ids.begin(), c->eos_token_ids.end(), id) == c->eos_token_ids.end()) {
      c->eos_token_ids.push_back(id);
    }
  }
  return Status::Ok();
}

Status Add(formats::GgufWriter* w, const std::string& key, int64_t v) {
  return w->AddMetadata(key, GgufValue::Int(GgufValueType::kU32, v));
}

// Mixture of experts (<arch>.expert_count > 0): Mixtral (llama, experts as wide as
// feed_forward_length) or Qwen3-MoE (expert_feed_forward_length). llama.cpp routes both by the
// softmax of the router, its top experts_used_count, weights normalised.
Status GgufExperts(const GgufMetadata& m, const std::string& a, ModelConfig* c) {
  KVF_ASSIGN_OR_RETURN(int32_t experts, IntKeyOr(m, a + ".expert_count", 0));
  if (experts == 0) return Status::Ok();
  MoeShape& moe = c->moe;
  moe.num_experts = experts;
  KVF_ASSIGN_OR_RETURN(moe.experts_per_token, IntKey(m, a + ".expert_used_count"));
  KVF_ASSIGN_OR_RETURN(moe.expert_ffn_dim,
                       IntKeyOr(m, a + ".expert_feed_forward_length", c->ffn_dim));
  KVF_ASSIGN_OR_RETURN(int32_t shared, IntKeyOr(m, a + ".expert_shared_count", 0));
  if (shared != 0) {
    return InvalidArgumentError("GGUF: " + a + ".expert_shared_count " + std::to_string(shared) +
                                ": shared experts are supported for DeepSeek Hugging Face "
                                "checkpoints only");
  }
  return Status::Ok();
}

Status AddGgufExperts(const ModelConfig& c, formats::GgufWriter* w) {
  if (!c.is_moe()) return Status::Ok();
  const std::string& a = c.architecture;
  KVF_RETURN_IF_ERROR(Add(w, a + ".expert_count", c.moe.num_experts));
  KVF_RETURN_IF_ERROR(Add(w, a + ".expert_used_count", c.moe.experts_per_token));
  if (a == "qwen3moe") {
    KVF_RETURN_IF_ERROR(Add(w, a + ".expert_feed_forward_length", c.moe.expert_ffn_dim));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromGguf(const formats::GgufFile& file, std::string name) {
  const GgufMetadata& m = file.metadata();
  KVF_ASSIGN_OR_RETURN(std::string a, m.GetString("general.architecture"));
  if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "qwen3moe") {
    return InvalidArgumentError("GGUF: general.architecture '" + a +
                                "' is not supported (supported: llama, qwen2, qwen3, qwen3moe)");
  }
  ModelConfig c;
  c.name = std::move(name);
  c.architecture = a;
  KVF_RETURN_IF_ERROR(GgufShape(m, a, &c));
  KVF_ASSIGN_OR_RETURN(const formats::TensorView* embed, file.Get("token_embd.weight"));
  if (embed->shape.size() != 2) return InvalidArgumentError("GGUF: token_embd.weight is not 2-D");
  c.vocab_size = static_cast<int32_t>(embed->shape[0]);
  c.tie_embeddings = file.Find("output.weight") == nullptr;
  c.attention_bias = a == "qwen2";
  c.qk_norm = a == "qwen3" || a == "qwen3moe";
  KVF_RETURN_IF_ERROR(GgufExperts(m, a, &c));
  KVF_RETURN_IF_ERROR(GgufRopeScaling(file, a, &c));
  KVF_RETURN_IF_ERROR(Tokens(m, &c));
  KVF_RETURN_IF_ERROR(c.Validate());
  return c;
}

Status AddGgufModelMetadata(const ModelConfig& c, formats::GgufWriter* w) {
  const std::string& a = c.architecture;
  KVF_RETURN_IF_ERROR(w->AddMetadata("general.architecture", GgufValue::String(a)));
  KVF_RETURN_IF_ERROR(w->AddMetadata("general.name", GgufValue::String(c.name)));
  KVF_RETURN_IF_ERROR(Add(w, a + ".context_length", c.max_position));
  KVF_RETURN_IF_ERROR(Add(w, a + ".embedding_length", c.hidden_dim));
  KVF_RETURN_IF_ERROR(Add(w, a + ".block_count", c.num_layers));
  // Mixtral's (llama) experts are as wide as its feed_forward_length.
  const bool mixtral = a == "llama" && c.is_moe();
  KVF_RETURN_IF_ERROR(
      Add(w, a + ".feed_forward_length", mixtral ? c.moe.expert_ffn_dim : c.ffn_dim));
  KVF_RETURN_IF_ERROR(AddGgufExperts(c, w));
  KVF_RETURN_IF_ERROR(Add(w, a + ".attention.head_count", c.num_heads));
  KVF_RETURN_IF_ERROR(Add(w, a + ".attention.head_count_kv", c.num_kv_heads));
  KVF_RETURN_IF_ERROR(Add(w, a + ".attention.key_length", c.head_dim));
  KVF_RETURN_IF_ERROR(Add(w, a + ".attention.value_length", c.head_dim));
  KVF_RETURN_IF_ERROR(Add(w, a + ".rope.dimension_count", c.head_dim));
  KVF_RETURN_IF_ERROR(
      w->AddMetadata(a + ".rope.freq_base", GgufValue::Float(GgufValueType::kF32, c.rope_theta)));
  KVF_RETURN_IF_ERROR(w->AddMetadata(a + ".attention.layer_norm_rms_epsilon",
                                     GgufValue::Float(GgufValueType::kF32, c.rms_norm_eps)));
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kLinear) {
    KVF_RETURN_IF_ERROR(w->AddMetadata(a + ".rope.scaling.type", GgufValue::String("linear")));
    KVF_RETURN_IF_ERROR(w->AddMetadata(a + ".rope.scaling.factor",
                                       GgufValue::Float(GgufValueType::kF32, r.factor)));
  } else if (r.type == RopeScaling::Type::kLlama3 || r.type == RopeScaling::Type::kFactors) {
    const std::vector<float> factors = RopeFrequencyFactors(r, c.head_dim, c.rope_theta);
    std::vector<std::byte> bytes(factors.size() * 4);
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    KVF_RETURN_IF_ERROR(w->AddTensor("rope_freqs.weight", formats::DType::kF32,
                                     {static_cast<int64_t>(factors.size())}, bytes));
  }
  return Status::Ok();
}

}  // namespace kvferry::engine
