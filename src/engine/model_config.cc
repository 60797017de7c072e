#include "kvferry/engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::engine {

namespace {

// The MLA fields: all zero for other architectures; consistent shapes for "deepseek".
Status ValidateMla(const ModelConfig& c) {
  const MlaShape& m = c.mla;
  if (c.architecture != "deepseek") {
    if (c.is_mla() || m.q_lora_rank != 0) {
      return InvalidArgumentError("model config: MLA fields need architecture 'deepseek'");
    }
    return Status::Ok();
  }
  if (m.kv_lora_rank <= 0 || m.qk_nope_head_dim <= 0 || m.qk_rope_head_dim <= 0 ||
      m.v_head_dim <= 0 || m.q_lora_rank < 0) {
    return InvalidArgumentError(
        "model config: deepseek needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
        "v_head_dim > 0 and q_lora_rank >= 0");
  }
  if (c.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim || c.num_kv_heads != 1) {
    return InvalidArgumentError(
        "model config: deepseek (MLA) needs head_dim = qk_nope_head_dim + qk_rope_head_dim and "
        "num_kv_heads = 1 (the latent)");
  }
  if (c.attention_bias || c.qk_norm) {
    return InvalidArgumentError("model config: deepseek has no attention biases or q/k norms");
  }
  return Status::Ok();
}

// The MoE fields: none for dense architectures; a consistent routing for the MoE ones.
Status ValidateMoe(const ModelConfig& c) {
  const MoeShape& m = c.moe;
  auto bad = [](const std::string& why) { return InvalidArgumentError("model config: " + why); };
  if (!c.is_moe()) {
    if (c.architecture == "qwen3moe") return bad("qwen3moe needs num_experts > 0");
    return m == MoeShape{} ? Status::Ok() : bad("MoE fields need num_experts > 0");
  }
  if (c.architecture != "llama" && c.architecture != "qwen3moe" && c.architecture != "deepseek") {
    return bad("architecture '" + c.architecture + "' has no mixture-of-experts layers");
  }
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts) {
    return bad("experts_per_token must be in [1, num_experts]");
  }
  if (m.expert_ffn_dim <= 0 || m.shared_experts < 0) {
    return bad("expert_ffn_dim must be > 0 and shared_experts >= 0");
  }
  if (m.first_dense_layers < 0 || m.first_dense_layers > c.num_layers) {
    return bad("first_dense_layers must be in [0, num_layers]");
  }
  if (m.num_groups < 1 || m.num_experts % m.num_groups != 0 || m.topk_groups < 1 ||
      m.topk_groups > m.num_groups) {
    return bad("num_groups must divide num_experts and topk_groups be in [1, num_groups]");
  }
  const int32_t per_group = m.num_experts / m.num_groups;
  if (m.experts_per_token > m.topk_groups * per_group || m.group_score_top < 1 ||
      m.group_score_top > per_group) {
    return bad("experts_per_token must fit in topk_groups groups, group_score_top in a group");
  }
  if (!(m.routed_scaling_factor > 0.0f)) return bad("routed_scaling_factor must be > 0");
  return Status::Ok();
}

}  // namespace

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

float ModelConfig::softmax_scale() const {
  if (rope_scaling.type == RopeScaling::Type::kYarn) {
    const double m = YarnMscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    return static_cast<float>(m * m / std::sqrt(static_cast<double>(head_dim)));
  }
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

Status ModelConfig::Validate() const {
  auto positive = [](int32_t v, const char* field) -> Status {
    if (v <= 0) return InvalidArgumentError(std::string("model config: ") + field + " must be > 0");
    return Status::Ok();
  };
  KVF_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  KVF_RETURN_IF_ERROR(positive(hidden_dim, "hidden_dim"));
  KVF_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  KVF_RETURN_IF_ERROR(positive(num_heads, "num_heads"));
  KVF_RETURN_IF_ERROR(positive(num_kv_heads, "num_kv_heads"));
  KVF_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  KVF_RETURN_IF_ERROR(positive(ffn_dim, "ffn_dim"));
  KVF_RETURN_IF_ERROR(positive(max_position, "max_position"));
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgumentError("model config: num_kv_heads (" + std::to_string(num_kv_heads) +
                                ") must divide num_heads (" + std::to_string(num_heads) + ")");
  }
  if (rope_dim() % 2 != 0) {
    return InvalidArgumentError("model config: head_dim (the rotated width) must be even");
  }
  if (!(rope_theta > 0.0f)) return InvalidArgumentError("model config: rope_theta must be > 0");
  if (!(rms_norm_eps > 0.0f)) return InvalidArgumentError("model config: rms_norm_eps must be > 0");
  if (bos_token_id >= vocab_size) {
    return InvalidArgumentError("model config: bos_token_id outside the vocabulary");
  }
  for (int32_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return InvalidArgumentError("model config: eos token id " + std::to_string(eos) +
                                  " outside the vocabulary");
    }
  }
  if (architecture != "llama" && architecture != "qwen2" && architecture != "qwen3" &&
      architecture != "qwen3moe" && architecture != "deepseek") {
    return InvalidArgumentError("model config: unknown architecture '" + architecture + "'");
  }
  KVF_RETURN_IF_ERROR(ValidateMla(*this));
  KVF_RETURN_IF_ERROR(ValidateMoe(*this));
  if (rope_scaling.type != RopeScaling::Type::kNone && !(rope_scaling.factor > 0.0f)) {
    return InvalidArgumentError("model config: rope_scaling.factor must be > 0");
  }
  if (rope_scaling.type == RopeScaling::Type::kFactors &&
      static_cast<int32_t>(rope_scaling.freq_factors.size()) != rope_dim() / 2) {
    return InvalidArgumentError("model config: rope frequency factors must number head_dim / 2");
  }
  if (rope_scaling.type == RopeScaling::Type::kYarn && !is_mla()) {
    return InvalidArgumentError("model config: yarn rope_scaling is supported for MLA only");
  }
  if (rope_scaling.type == RopeScaling::Type::kYarn &&
      YarnMscale(rope_scaling.factor, rope_scaling.mscale) !=
          YarnMscale(rope_scaling.factor, rope_scaling.mscale_all_dim)) {
    return InvalidArgumentError(
        "model config: yarn rope_scaling with mscale != mscale_all_dim (a cos/sin factor other "
        "than 1) is not supported");
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3 &&
      !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
        rope_scaling.low_freq_factor > 0.0f && rope_scaling.original_max_position > 0)) {
    return InvalidArgumentError(
        "model config: llama3 rope_scaling needs high_freq_factor > low_freq_factor > 0 and "
        "original_max_position_embeddings > 0");
  }
  return Status::Ok();
}

int64_t ModelConfig::NumParameters() const {
  const int64_t d = hidden_dim;
  const int64_t q = int64_t{num_heads} * head_dim;
  const int64_t kv = int64_t{num_kv_heads} * head_dim;
  int64_t attn =
      d * (q + 2 * kv) + q * d + (attention_bias ? q + 2 * kv : 0) + (qk_norm ? 2 * head_dim : 0);
  if (is_mla()) {
    const MlaShape& m = mla;
    const int64_t h = num_heads;
    attn = (m.q_lora_rank > 0 ? d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q : d * q) +
           d * kv_cache_head_dim() + m.kv_lora_rank +
           m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim) + h * m.v_head_dim * d;
  }
  int64_t layers = 0;
  for (int32_t l = 0; l < num_layers; ++l) {
    layers += attn + 3 * d * dense_ffn_dim(l) + 2 * d;
    if (!is_moe_layer(l)) continue;
    const int64_t e = moe.num_experts;
    layers += e * d + e * 3 * d * moe.expert_ffn_dim + (moe.correction_bias ? e : 0);
  }
  const int64_t embed = int64_t{vocab_size} * d;
  return embed * (tie_embeddings ? 1 : 2) + layers + d;
}

namespace {

// DeepSeek's yarn: frequency i is divided by 1 / (ramp_i / factor + 1 - ramp_i), the ramp
// rising linearly from 0 to 1 over [low, high], the dims where beta_fast and beta_slow
// rotations fit in original_max_position.
std::vector<float> YarnFactors(const RopeScaling& r, int32_t dim, float theta) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(r.original_max_position / (rotations * 2.0 * M_PI)) /
           (2.0 * std::log(static_cast<double>(theta)));
  };
  const double low = std::max(std::floor(correction_dim(r.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(r.beta_slow)), dim - 1.0);
  if (low == high) high += 0.001;
  std::vector<float> out(static_cast<size_t>(dim / 2));
  for (int32_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    out[i] = static_cast<float>(1.0 / (ramp / r.factor + 1.0 - ramp));
  }
  return out;
}

}  // namespace

std::vector<float> RopeFrequencyFactors(const RopeScaling& r, int32_t head_dim, float theta) {
  const int32_t half = head_dim / 2;
  if (r.type == RopeScaling::Type::kFactors) return r.freq_factors;
  std::vector<float> out(static_cast<size_t>(half), 1.0f);
  if (r.type == RopeScaling::Type::kLinear) std::fill(out.begin(), out.end(), r.factor);
  if (r.type == RopeScaling::Type::kYarn) return YarnFactors(r, head_dim, theta);
  if (r.type != RopeScaling::Type::kLlama3) return out;
  // Llama 3.1: long wavelengths are scaled by `factor`, short ones not, and the band between
  // blends the two smoothly (the same rule as Hugging Face's rope_init and llama.cpp's
  // converter, expressed as a divisor per frequency).
  const double low_wavelen = r.original_max_position / static_cast<double>(r.low_freq_factor);
  const double high_wavelen = r.original_max_position / static_cast<double>(r.high_freq_factor);
  for (int32_t i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      out[i] = r.factor;
      continue;
    }
    const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                          (r.high_freq_factor - r.low_freq_factor);
    out[i] = static_cast<float>(1.0 / ((1.0 - smooth) / r.factor + smooth));
  }
  return out;
}

namespace {

// One built-in model: what differs between them. Every built-in has the byte-level tokenizer's
// specials, RoPE theta 10000, RMSNorm eps 1e-5, untied embeddings and 4096 positions.
struct BuiltinModel {
  const char* name;
  const char* architecture = "llama";
  int32_t extra_vocab = 0;  // ids past the tokenizer's, which it never produces
  int32_t hidden_dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 0 with MLA: qk_nope_head_dim + qk_rope_head_dim
  int32_t ffn_dim = 0;
  MlaShape mla{};
  MoeShape moe{};
  uint64_t weight_seed = 0;
};

// In the order the unknown-name error lists them.
constexpr BuiltinModel kBuiltinModels[] = {
    {.name = "tiny",
     .hidden_dim = 128,
     .num_layers = 4,
     .num_heads = 4,
     .num_kv_heads = 2,
     .head_dim = 32,
     .ffn_dim = 384,
     .weight_seed = 0x6b766665727279ull},  // "kvferry"
    {.name = "small",
     .hidden_dim = 512,
     .num_layers = 8,
     .num_heads = 8,
     .num_kv_heads = 4,
     .head_dim = 64,
     .ffn_dim = 1408,
     .weight_seed = 0x736d616c6cull},  // "small"
    // No width is a multiple of 8, so every kernel runs its tail code inside a real forward
    // pass: dot lengths 99, 66 (o_proj's two row-parallel groups of 3 heads), 130 and 131
    // (down_proj's groups of 261 columns), 22 leave 3, 2, 2, 3, 6 elements after the 8-lane part;
    // matmul widths 99, 522, 263 leave 3, 2, 3 columns after the 4-column tiles; half a head
    // (11) is odd for RoPE. Vocab 263: the tokenizer's 260 ids plus 3 it never produces.
    {.name = "tiny-odd",
     .extra_vocab = 3,
     .hidden_dim = 99,
     .num_layers = 3,
     .num_heads = 6,
     .num_kv_heads = 2,
     .head_dim = 22,
     .ffn_dim = 261,
     .weight_seed = 0x6f6464ull},  // "odd"
    // As many KV heads as tensor-parallel ranks at TP 4, so each rank holds one KV head of its
    // own (tiny's 2 KV heads are replicated at TP 4): the P/D tests need both.
    {.name = "tiny-kv4",
     .hidden_dim = 128,
     .num_layers = 2,
     .num_heads = 8,
     .num_kv_heads = 4,
     .head_dim = 16,
     .ffn_dim = 256,
     .weight_seed = 0x6b7634ull},  // "kv4"
    // Multi-head latent attention (DeepSeek-V2/V3 style) at tiny's width: a KV cache of
    // 32 + 8 = 40 values per token per layer, where GQA at 2 KV heads of 32 stores 128.
    {.name = "tiny-mla",
     .architecture = "deepseek",
     .hidden_dim = 128,
     .num_layers = 2,
     .num_heads = 4,
     .num_kv_heads = 1,
     .ffn_dim = 256,
     .mla = {.q_lora_rank = 48,
             .kv_lora_rank = 32,
             .qk_nope_head_dim = 16,
             .qk_rope_head_dim = 8,
             .v_head_dim = 16},
     .weight_seed = 0x6d6c61ull},  // "mla"
    // Mixture of experts, Mixtral style: every layer routes each token to 2 of 8 experts.
    {.name = "tiny-moe",
     .hidden_dim = 128,
     .num_layers = 2,
     .num_heads = 4,
     .num_kv_heads = 2,
     .head_dim = 32,
     .ffn_dim = 128,
     .moe = {.num_experts = 8, .experts_per_token = 2, .expert_ffn_dim = 128},
     .weight_seed = 0x6d6f65ull},  // "moe"
    // DeepSeek-V3 style: MLA, a dense first layer, then 4 of 16 experts from the best 2 of 4
    // groups by sigmoid scores with the correction bias, 2 shared experts, weights x 2.5.
    {.name = "tiny-mla-moe",
     .architecture = "deepseek",
     .hidden_dim = 128,
     .num_layers = 3,
     .num_heads = 4,
     .num_kv_heads = 1,
     .ffn_dim = 256,
     .mla = {.q_lora_rank = 48,
             .kv_lora_rank = 32,
             .qk_nope_head_dim = 16,
             .qk_rope_head_dim = 8,
             .v_head_dim = 16},
     .moe = {.num_experts = 16,
             .experts_per_token = 4,
             .expert_ffn_dim = 64,
             .shared_experts = 2,
             .first_dense_layers = 1,
             .scoring = MoeShape::Scoring::kSigmoid,
             .norm_topk_prob = true,
             .routed_scaling_factor = 2.5f,
             .num_groups = 4,
             .topk_groups = 2,
             .group_score_top = 2,
             .correction_bias = true},
     .weight_seed = 0x6d6c616d6f65ull},  // "mlamoe"
};

ModelConfig ConfigOf(const BuiltinModel& m) {
  ModelConfig c;
  c.name = m.name;
  c.architecture = m.architecture;
  c.vocab_size = tokenizer::Tokenizer::kBuiltinVocabSize + m.extra_vocab;
  c.bos_token_id = tokenizer::Tokenizer::kBuiltinBos;
  c.eos_token_ids = {tokenizer::Tokenizer::kBuiltinEos};
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tie_embeddings = false;
  c.hidden_dim = m.hidden_dim;
  c.num_layers = m.num_layers;
  c.num_heads = m.num_heads;
  c.num_kv_heads = m.num_kv_heads;
  c.mla = m.mla;
  c.moe = m.moe;
  c.head_dim = m.head_dim > 0 ? m.head_dim : m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
  c.ffn_dim = m.ffn_dim;
  c.max_position = 4096;
  c.weight_seed = m.weight_seed;
  return c;
}

}  // namespace

StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name) {
  std::string known;
  for (const BuiltinModel& m : kBuiltinModels) {
    if (name == m.name) return ConfigOf(m);
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  return NotFoundError("unknown built-in model '" + std::string(name) + "' (known: " + known +
                       "; or a path to a checkpoint file)");
}

}  // namespace kvferry::engine
