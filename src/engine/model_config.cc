#include "kvferry/engine/model_config.h"

#include <cmath>
#include <string>

#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::engine {

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
  if (head_dim % 2 != 0) return InvalidArgumentError("model config: head_dim must be even");
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
  if (architecture != "llama" && architecture != "qwen2" && architecture != "qwen3") {
    return InvalidArgumentError("model config: unknown architecture '" + architecture + "'");
  }
  if (rope_scaling.type != RopeScaling::Type::kNone && !(rope_scaling.factor > 0.0f)) {
    return InvalidArgumentError("model config: rope_scaling.factor must be > 0");
  }
  if (rope_scaling.type == RopeScaling::Type::kFactors &&
      static_cast<int32_t>(rope_scaling.freq_factors.size()) != head_dim / 2) {
    return InvalidArgumentError("model config: rope frequency factors must number head_dim / 2");
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
  const int64_t per_layer = d * (q + 2 * kv) + q * d + 3 * d * ffn_dim + 2 * d +
                            (attention_bias ? q + 2 * kv : 0) + (qk_norm ? 2 * head_dim : 0);
  const int64_t embed = int64_t{vocab_size} * d;
  return embed * (tie_embeddings ? 1 : 2) + per_layer * num_layers + d;
}

std::vector<float> RopeFrequencyFactors(const RopeScaling& r, int32_t head_dim, float theta) {
  const int32_t half = head_dim / 2;
  if (r.type == RopeScaling::Type::kFactors) return r.freq_factors;
  std::vector<float> out(static_cast<size_t>(half), 1.0f);
  if (r.type == RopeScaling::Type::kLinear) std::fill(out.begin(), out.end(), r.factor);
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

StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name) {
  ModelConfig c;
  c.vocab_size = tokenizer::Tokenizer::kBuiltinVocabSize;
  c.bos_token_id = tokenizer::Tokenizer::kBuiltinBos;
  c.eos_token_ids = {tokenizer::Tokenizer::kBuiltinEos};
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tie_embeddings = false;
  if (name == "tiny") {
    c.name = "tiny";
    c.hidden_dim = 128;
    c.num_layers = 4;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.ffn_dim = 384;
    c.max_position = 4096;
    c.weight_seed = 0x6b766665727279ull;  // "kvferry"
    return c;
  }
  if (name == "small") {
    c.name = "small";
    c.hidden_dim = 512;
    c.num_layers = 8;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 64;
    c.ffn_dim = 1408;
    c.max_position = 4096;
    c.weight_seed = 0x736d616c6cull;  // "small"
    return c;
  }
  if (name == "tiny-kv4") {
    // As many KV heads as tensor-parallel ranks at TP 4, so each rank holds one KV head of its
    // own (tiny's 2 KV heads are replicated at TP 4): the P/D tests need both.
    c.name = "tiny-kv4";
    c.hidden_dim = 128;
    c.num_layers = 2;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 16;
    c.ffn_dim = 256;
    c.max_position = 4096;
    c.weight_seed = 0x6b7634ull;  // "kv4"
    return c;
  }
  if (name == "tiny-odd") {
    // No width is a multiple of 8, so every kernel runs its tail code inside a real forward
    // pass: dot lengths 99, 66 (o_proj's two row-parallel groups of 3 heads), 130 and 131
    // (down_proj's groups of 261 columns), 22 leave 3, 2, 2, 3, 6 elements after the 8-lane part;
    // matmul widths 99, 522, 263 leave 3, 2, 3 columns after the 4-column tiles; half a head
    // (11) is odd for RoPE. Vocab 263: the tokenizer's 260 ids plus 3 it never produces.
    c.name = "tiny-odd";
    c.vocab_size = tokenizer::Tokenizer::kBuiltinVocabSize + 3;
    c.hidden_dim = 99;
    c.num_layers = 3;
    c.num_heads = 6;
    c.num_kv_heads = 2;
    c.head_dim = 22;
    c.ffn_dim = 261;
    c.max_position = 4096;
    c.weight_seed = 0x6f6464ull;  // "odd"
    return c;
  }
  return NotFoundError(
      "unknown built-in model '" + std::string(name) +
      "' (known: tiny, small, tiny-odd, tiny-kv4; or a path to a checkpoint file)");
}

}  // namespace kvferry::engine
