#include "engine/model/hf_config.h"

#include <map>

namespace kvferry::engine {
namespace {

using Json = nlohmann::json;

const std::map<std::string, std::string>& Architectures() {
  static const std::map<std::string, std::string> kArchs = {
      {"LlamaForCausalLM", "llama"},         {"MistralForCausalLM", "llama"},
      {"Qwen2ForCausalLM", "qwen2"},         {"Qwen3ForCausalLM", "qwen3"},
      {"MixtralForCausalLM", "llama"},       {"Qwen3MoeForCausalLM", "qwen3moe"},
      {"DeepseekV2ForCausalLM", "deepseek"}, {"DeepseekV3ForCausalLM", "deepseek"},
  };
  return kArchs;
}

Status Refuse(const std::string& field, const std::string& why) {
  return InvalidArgumentError("config.json: " + field + ": " + why);
}

// Reads an integer field (default `dflt`; `required` fails when absent).
Status Int(const Json& j, const char* key, int32_t* out, bool required, int32_t dflt = 0) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Refuse(key, "missing");
    *out = dflt;
    return Status::Ok();
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
    return Refuse(key, "must be a non-negative integer");
  }
  *out = it->get<int32_t>();
  return Status::Ok();
}

Status Float(const Json& j, const char* key, float* out, float dflt) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = dflt;
    return Status::Ok();
  }
  if (!it->is_number()) return Refuse(key, "must be a number");
  *out = it->get<float>();
  return Status::Ok();
}

// eos_token_id: an integer or a list of them; appended to `ids` without duplicates.
Status EosIds(const Json& j, std::vector<int32_t>* ids) {
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return Status::Ok();
  const Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Refuse("eos_token_id", "must be an integer or a list of integers");
    }
    const int32_t id = v.get<int32_t>();
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
  }
  return Status::Ok();
}

Status RopeScalingFrom(const Json& j, RopeScaling* out) {
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Refuse("rope_scaling", "must be an object");
  const Json& r = *it;
  const std::string type = r.value("rope_type", r.value("type", std::string()));
  if (type == "default") return Status::Ok();
  KVF_RETURN_IF_ERROR(Float(r, "factor", &out->factor, 1.0f));
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    return Status::Ok();
  }
  if (type == "yarn") {  // DeepSeek's (accepted for architecture deepseek only)
    out->type = RopeScaling::Type::kYarn;
    KVF_RETURN_IF_ERROR(Float(r, "beta_fast", &out->beta_fast, 32.0f));
    KVF_RETURN_IF_ERROR(Float(r, "beta_slow", &out->beta_slow, 1.0f));
    KVF_RETURN_IF_ERROR(Float(r, "mscale", &out->mscale, 1.0f));
    KVF_RETURN_IF_ERROR(Float(r, "mscale_all_dim", &out->mscale_all_dim, 0.0f));
    return Int(r, "original_max_position_embeddings", &out->original_max_position, false, 4096);
  }
  if (type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
    KVF_RETURN_IF_ERROR(Float(r, "low_freq_factor", &out->low_freq_factor, 1.0f));
    KVF_RETURN_IF_ERROR(Float(r, "high_freq_factor", &out->high_freq_factor, 4.0f));
    return Int(r, "original_max_position_embeddings", &out->original_max_position, false, 8192);
  }
  return Refuse("rope_scaling.rope_type",
                "'" + type + "' is not supported (supported: linear, llama3; yarn for DeepSeek)");
}

// Sliding-window attention: Mistral's window is honoured by capping the context at it; Qwen2's
// (use_sliding_window) is refused.
Status SlidingWindow(const Json& j, const std::string& arch, ModelConfig* c) {
  const auto it = j.find("sliding_window");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return Refuse("sliding_window", "must be a positive integer or null");
  }
  if (arch != "llama") {
    if (j.value("use_sliding_window", false)) {
      return Refuse("use_sliding_window", "sliding-window attention is not supported");
    }
    return Status::Ok();
  }
  c->max_position = std::min(c->max_position, it->get<int32_t>());
  return Status::Ok();
}

// Mixtral (num_local_experts, experts as wide as intermediate_size) and Qwen3-MoE
// (num_experts, moe_intermediate_size; every layer sparse): softmax routing, top
// num_experts_per_tok.
Status MixtralOrQwenMoe(const Json& j, ModelConfig* c) {
  MoeShape& m = c->moe;
  const bool mixtral = c->architecture == "llama";
  if (!mixtral && !j.contains("num_experts")) return Status::Ok();  // Validate refuses
  KVF_RETURN_IF_ERROR(Int(j, mixtral ? "num_local_experts" : "num_experts", &m.num_experts, true));
  KVF_RETURN_IF_ERROR(Int(j, "num_experts_per_tok", &m.experts_per_token, true));
  if (mixtral) {
    m.expert_ffn_dim = c->ffn_dim;
    m.norm_topk_prob = true;
    return Status::Ok();
  }
  KVF_RETURN_IF_ERROR(Int(j, "moe_intermediate_size", &m.expert_ffn_dim, true));
  m.norm_topk_prob = j.value("norm_topk_prob", false);
  int32_t step = 1;
  KVF_RETURN_IF_ERROR(Int(j, "decoder_sparse_step", &step, false, 1));
  const auto dense = j.find("mlp_only_layers");
  if (step != 1 || (dense != j.end() && dense->is_array() && !dense->empty())) {
    return Refuse(step != 1 ? "decoder_sparse_step" : "mlp_only_layers",
                  "dense layers between the sparse ones are not supported (every layer must be "
                  "mixture-of-experts)");
  }
  return Status::Ok();
}

// DeepSeek-V2/V3's MoE layers (n_routed_experts > 0; the first first_k_dense_replace layers
// dense): V2 softmax, topk_method greedy or group_limited_greedy (a group's score its best
// expert's); V3 sigmoid with e_score_correction_bias, noaux_tc (its best two's).
Status DeepseekMoe(const Json& j, ModelConfig* c) {
  MoeShape& m = c->moe;
  KVF_RETURN_IF_ERROR(Int(j, "n_routed_experts", &m.num_experts, false, 0));
  if (m.num_experts == 0) return Status::Ok();
  KVF_RETURN_IF_ERROR(Int(j, "num_experts_per_tok", &m.experts_per_token, true));
  KVF_RETURN_IF_ERROR(Int(j, "moe_intermediate_size", &m.expert_ffn_dim, true));
  KVF_RETURN_IF_ERROR(Int(j, "n_shared_experts", &m.shared_experts, false, 0));
  KVF_RETURN_IF_ERROR(Int(j, "first_k_dense_replace", &m.first_dense_layers, false, 0));
  int32_t freq = 1;
  KVF_RETURN_IF_ERROR(Int(j, "moe_layer_freq", &freq, false, 1));
  if (freq != 1) return Refuse("moe_layer_freq", "only 1 (every layer after the dense ones)");
  const std::string scoring = j.value("scoring_func", std::string("softmax"));
  const std::string method = j.value("topk_method", std::string("greedy"));
  if (scoring != "softmax" && scoring != "sigmoid") {
    return Refuse("scoring_func", "'" + scoring + "' is not supported (softmax, sigmoid)");
  }
  if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc") {
    return Refuse("topk_method",
                  "'" + method + "' is not supported (greedy, group_limited_greedy, noaux_tc)");
  }
  m.scoring = scoring == "sigmoid" ? MoeShape::Scoring::kSigmoid : MoeShape::Scoring::kSoftmax;
  m.correction_bias = method == "noaux_tc";
  m.norm_topk_prob = j.value("norm_topk_prob", false);
  KVF_RETURN_IF_ERROR(Float(j, "routed_scaling_factor", &m.routed_scaling_factor, 1.0f));
  if (method != "greedy") {
    KVF_RETURN_IF_ERROR(Int(j, "n_group", &m.num_groups, false, 1));
    KVF_RETURN_IF_ERROR(Int(j, "topk_group", &m.topk_groups, false, 1));
    m.group_score_top = method == "noaux_tc" ? 2 : 1;
  }
  return Status::Ok();
}

// DeepSeek-V2/V3: multi-head latent attention (ModelConfig::mla), dense or MoE MLP layers.
Status Deepseek(const Json& j, ModelConfig* c) {
  MlaShape& m = c->mla;
  KVF_RETURN_IF_ERROR(Int(j, "q_lora_rank", &m.q_lora_rank, false, 0));  // null: q_proj
  KVF_RETURN_IF_ERROR(Int(j, "kv_lora_rank", &m.kv_lora_rank, true));
  KVF_RETURN_IF_ERROR(Int(j, "qk_nope_head_dim", &m.qk_nope_head_dim, true));
  KVF_RETURN_IF_ERROR(Int(j, "qk_rope_head_dim", &m.qk_rope_head_dim, true));
  KVF_RETURN_IF_ERROR(Int(j, "v_head_dim", &m.v_head_dim, true));
  c->head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;  // the query/key head
  c->num_kv_heads = 1;                                    // the latent, shared by every head
  KVF_RETURN_IF_ERROR(DeepseekMoe(j, c));
  if (j.value("attention_bias", false)) {
    return Refuse("attention_bias", "biases on DeepSeek's attention projections are not supported");
  }
  if (!j.value("rope_interleave", true)) {
    return Refuse("rope_interleave", "false is not supported (DeepSeek checkpoints interleave)");
  }
  return Status::Ok();
}

Status Shape(const Json& j, ModelConfig* c) {
  KVF_RETURN_IF_ERROR(Int(j, "vocab_size", &c->vocab_size, true));
  KVF_RETURN_IF_ERROR(Int(j, "hidden_size", &c->hidden_dim, true));
  KVF_RETURN_IF_ERROR(Int(j, "num_hidden_layers", &c->num_layers, true));
  KVF_RETURN_IF_ERROR(Int(j, "num_attention_heads", &c->num_heads, true));
  KVF_RETURN_IF_ERROR(Int(j, "num_key_value_heads", &c->num_kv_heads, false, c->num_heads));
  if (c->num_heads == 0) return Refuse("num_attention_heads", "must be > 0");
  KVF_RETURN_IF_ERROR(Int(j, "head_dim", &c->head_dim, false, c->hidden_dim / c->num_heads));
  KVF_RETURN_IF_ERROR(Int(j, "intermediate_size", &c->ffn_dim, true));
  KVF_RETURN_IF_ERROR(Int(j, "max_position_embeddings", &c->max_position, false, 2048));
  KVF_RETURN_IF_ERROR(Float(j, "rope_theta", &c->rope_theta, 10000.0f));
  KVF_RETURN_IF_ERROR(Float(j, "rms_norm_eps", &c->rms_norm_eps, 1e-6f));
  KVF_RETURN_IF_ERROR(Int(j, "bos_token_id", &c->bos_token_id, false, -1));
  c->tie_embeddings = j.value("tie_word_embeddings", false);
  return Status::Ok();
}

// What a DeepseekV3 config.json says of MLA (and that every MLP layer is dense).
void AddDeepseekFields(const ModelConfig& c, Json* j) {
  const MlaShape& m = c.mla;
  (*j)["model_type"] = "deepseek_v3";
  (*j)["num_key_value_heads"] = c.num_heads;
  j->erase("head_dim");
  (*j)["q_lora_rank"] = m.q_lora_rank > 0 ? Json(m.q_lora_rank) : Json(nullptr);
  (*j)["kv_lora_rank"] = m.kv_lora_rank;
  (*j)["qk_nope_head_dim"] = m.qk_nope_head_dim;
  (*j)["qk_rope_head_dim"] = m.qk_rope_head_dim;
  (*j)["v_head_dim"] = m.v_head_dim;
  (*j)["first_k_dense_replace"] = c.is_moe() ? c.moe.first_dense_layers : c.num_layers;
  (*j)["attention_bias"] = false;
}

// The MoE fields of a Mixtral, Qwen3-MoE or DeepSeek config.json.
void AddMoeFields(const ModelConfig& c, Json* j) {
  const MoeShape& m = c.moe;
  (*j)["num_experts_per_tok"] = m.experts_per_token;
  if (c.architecture == "llama") {
    (*j)["model_type"] = "mixtral";
    (*j)["architectures"] = {"MixtralForCausalLM"};
    (*j)["num_local_experts"] = m.num_experts;
    (*j)["intermediate_size"] = m.expert_ffn_dim;
    return;
  }
  (*j)["moe_intermediate_size"] = m.expert_ffn_dim;
  (*j)["norm_topk_prob"] = m.norm_topk_prob;
  if (c.architecture == "qwen3moe") {
    (*j)["model_type"] = "qwen3_moe";
    (*j)["num_experts"] = m.num_experts;
    (*j)["decoder_sparse_step"] = 1;
    (*j)["mlp_only_layers"] = Json::array();
    return;
  }
  const bool v3 = m.scoring == MoeShape::Scoring::kSigmoid;
  (*j)["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  (*j)["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  (*j)["n_routed_experts"] = m.num_experts;
  (*j)["n_shared_experts"] = m.shared_experts;
  (*j)["moe_layer_freq"] = 1;
  (*j)["scoring_func"] = v3 ? "sigmoid" : "softmax";
  (*j)["topk_method"] = m.correction_bias  ? "noaux_tc"
                        : m.num_groups > 1 ? "group_limited_greedy"
                                           : "greedy";
  (*j)["n_group"] = m.num_groups;
  (*j)["topk_group"] = m.topk_groups;
  (*j)["routed_scaling_factor"] = m.routed_scaling_factor;
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromHf(const Json& j, const Json& generation, std::string name) {
  if (!j.is_object()) return InvalidArgumentError("config.json is not a JSON object");
  const auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string()) {
    return Refuse("architectures", "must list exactly one architecture");
  }
  const std::string arch_name = (*archs)[0].get<std::string>();
  const auto known = Architectures().find(arch_name);
  if (known == Architectures().end()) {
    return Refuse("architectures", "'" + arch_name +
                                       "' is not supported (supported: LlamaForCausalLM, "
                                       "MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, "
                                       "Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                                       "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)");
  }
  ModelConfig c;
  c.name = std::move(name);
  c.architecture = known->second;
  try {
    KVF_RETURN_IF_ERROR(Shape(j, &c));
    const std::string act = j.value("hidden_act", std::string("silu"));
    if (act != "silu") return Refuse("hidden_act", "'" + act + "' is not supported (silu only)");
    if (j.value("mlp_bias", false)) return Refuse("mlp_bias", "MLP biases are not supported");
    const bool attention_bias = j.value("attention_bias", false);
    if (c.architecture == "deepseek") KVF_RETURN_IF_ERROR(Deepseek(j, &c));
    if (arch_name == "MixtralForCausalLM" || c.architecture == "qwen3moe") {
      KVF_RETURN_IF_ERROR(MixtralOrQwenMoe(j, &c));
    }
    if (c.architecture == "llama" && attention_bias) {
      return Refuse("attention_bias",
                    "biases on the attention projections (incl. o_proj) are "
                    "not supported for Llama");
    }
    c.attention_bias = c.architecture == "qwen2" || attention_bias;
    c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3moe";
    KVF_RETURN_IF_ERROR(RopeScalingFrom(j, &c.rope_scaling));
    if (c.rope_scaling.type == RopeScaling::Type::kYarn && c.architecture != "deepseek") {
      return Refuse("rope_scaling.rope_type", "yarn is supported for DeepSeek models only");
    }
    KVF_RETURN_IF_ERROR(SlidingWindow(j, c.architecture, &c));
    KVF_RETURN_IF_ERROR(EosIds(j, &c.eos_token_ids));
    if (generation.is_object()) KVF_RETURN_IF_ERROR(EosIds(generation, &c.eos_token_ids));
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("config.json: ") + e.what());
  }
  KVF_RETURN_IF_ERROR(c.Validate());
  return c;
}

Json HfConfigJson(const ModelConfig& c, const std::string& dtype_name) {
  static const std::map<std::string, std::string> kClass = {{"llama", "LlamaForCausalLM"},
                                                            {"qwen2", "Qwen2ForCausalLM"},
                                                            {"qwen3", "Qwen3ForCausalLM"},
                                                            {"qwen3moe", "Qwen3MoeForCausalLM"},
                                                            {"deepseek", "DeepseekV3ForCausalLM"}};
  Json j = {{"architectures", {kClass.at(c.architecture)}},
            {"model_type", c.architecture},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_dim},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"intermediate_size", c.ffn_dim},
            {"max_position_embeddings", c.max_position},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.rms_norm_eps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"hidden_act", "silu"},
            {"torch_dtype", dtype_name}};
  if (c.architecture == "qwen3" || c.architecture == "qwen3moe") {
    j["attention_bias"] = c.attention_bias;
  }
  if (c.is_mla()) AddDeepseekFields(c, &j);
  if (c.is_moe()) AddMoeFields(c, &j);
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else if (r.type == RopeScaling::Type::kYarn) {
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", r.factor},
                         {"beta_fast", r.beta_fast},
                         {"beta_slow", r.beta_slow},
                         {"mscale", r.mscale},
                         {"mscale_all_dim", r.mscale_all_dim},
                         {"original_max_position_embeddings", r.original_max_position}};
  } else if (r.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position}};
  }
  return j;
}

}  // namespace kvferry::engine
