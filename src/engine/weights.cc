#include "engine/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvferry::engine {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), from (seed, tensor, index) only.
float HashUniform(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ (tensor * 0xd1b54a32d192ed03ull)) + index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// Uniform on [-1,1) has std 1/sqrt(3): `stddev` scales to the wanted spread.
std::vector<float> Fill(uint64_t seed, uint64_t tensor, int64_t n, float stddev) {
  std::vector<float> v(static_cast<size_t>(n));
  const float scale = stddev * std::sqrt(3.0f);
  for (int64_t i = 0; i < n; ++i) v[i] = HashUniform(seed, tensor, i) * scale;
  return v;
}

std::vector<float> Norm(uint64_t seed, uint64_t tensor, int64_t n) {
  std::vector<float> v = Fill(seed, tensor, n, 0.1f);
  for (float& x : v) x += 1.0f;
  return v;
}

bool Printable(int32_t token) { return token == '\n' || (token >= 32 && token < 127); }

}  // namespace

float* ModelWeights::AllocateF32(int64_t n) {
  auto buffer = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
  float* data = buffer->data();
  storage.push_back(std::move(buffer));
  return data;
}

namespace {

// Fills `n` values of tensor `tensor` into `out` (see Fill).
void FillInto(float* out, uint64_t seed, uint64_t tensor, int64_t n, float stddev) {
  const std::vector<float> v = Fill(seed, tensor, n, stddev);
  std::copy(v.begin(), v.end(), out);
}

// Generated storage for one fused matrix, returned as row-wise views: parts[i] has rows[i] rows.
template <size_t N>
std::array<WeightMatrix, N> FusedViews(ModelWeights& w, uint64_t seed, uint64_t tensor,
                                       std::array<int64_t, N> rows, int64_t cols, float stddev) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  float* data = w.AllocateF32(total * cols);
  FillInto(data, seed, tensor, total * cols, stddev);
  std::array<WeightMatrix, N> parts;
  for (size_t i = 0; i < N; ++i) {
    parts[i] = F32Matrix(data, rows[i], cols);
    data += rows[i] * cols;
  }
  return parts;
}

// The attention projections of one MLA layer (weights.h), from tensors `tensor`.. onwards.
void GenerateMla(ModelWeights& w, const ModelConfig& c, uint64_t tensor, LayerWeights& lw) {
  const uint64_t s = c.weight_seed;
  const MlaShape& m = c.mla;
  const int64_t d = c.hidden_dim;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  auto spread = [](int64_t fan_in) { return 2.0f / std::sqrt(static_cast<float>(fan_in)); };
  if (m.q_lora_rank > 0) {
    lw.q_a = FusedViews<1>(w, s, tensor, {m.q_lora_rank}, d, spread(d))[0];
    lw.q_a_norm = Norm(s, tensor + 1, m.q_lora_rank);
    lw.q_b = FusedViews<1>(w, s, tensor + 2, {q}, m.q_lora_rank, spread(m.q_lora_rank))[0];
  } else {
    lw.q = FusedViews<1>(w, s, tensor + 2, {q}, d, spread(d))[0];
  }
  lw.kv_a = FusedViews<1>(w, s, tensor + 3, {c.kv_cache_head_dim()}, d, spread(d))[0];
  lw.kv_a_norm = Norm(s, tensor + 4, m.kv_lora_rank);
  const int64_t kv_b_rows = int64_t{c.num_heads} * (m.qk_nope_head_dim + m.v_head_dim);
  lw.kv_b = FusedViews<1>(w, s, tensor + 5, {kv_b_rows}, m.kv_lora_rank, spread(m.kv_lora_rank))[0];
}

// The router and routed experts of MoE layer `l` (weights.h), from tensors of their own range
// (so a dense model's tensors keep their numbers). The router's logits have a std of ~2, so a
// token's experts are well separated and depend on it.
void GenerateExperts(ModelWeights& w, const ModelConfig& c, int32_t l, LayerWeights& lw) {
  const uint64_t s = c.weight_seed;
  const MoeShape& m = c.moe;
  const int64_t d = c.hidden_dim, f = m.expert_ffn_dim;
  const uint64_t base = 1'000'000 + uint64_t{8192} * 4 * static_cast<uint64_t>(l);
  lw.router =
      FusedViews<1>(w, s, base, {m.num_experts}, d, 2.0f / std::sqrt(static_cast<float>(d)))[0];
  if (m.correction_bias) {
    lw.router_bias = Fill(s, base + 1, m.num_experts, 0.05f);
    for (float& b : lw.router_bias) b = std::fabs(b);  // scores + bias stay positive
  }
  for (int32_t e = 0; e < m.num_experts; ++e) {
    const uint64_t t = base + 4 + 2 * static_cast<uint64_t>(e);
    const auto gu = FusedViews<2>(w, s, t, {f, f}, d, 1.0f / std::sqrt(static_cast<float>(d)));
    lw.expert_gate.push_back(gu[0]);
    lw.expert_up.push_back(gu[1]);
    lw.expert_down.push_back(
        FusedViews<1>(w, s, t + 1, {d}, f, 1.0f / std::sqrt(static_cast<float>(f)))[0]);
  }
}

}  // namespace

StatusOr<ModelWeights> GenerateWeights(const ModelConfig& c) {
  KVF_RETURN_IF_ERROR(c.Validate());
  const uint64_t s = c.weight_seed;
  const int64_t d = c.hidden_dim;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t vocab = c.vocab_size;
  ModelWeights w;
  w.config = c;
  w.embed = FusedViews<1>(w, s, 1, {vocab}, d, 1.0f)[0];
  uint64_t tensor = 100;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = Norm(s, tensor++, d);
    // Query/key weights a bit larger than 1/sqrt(dim) so attention is not uniform.
    if (c.is_mla()) {
      GenerateMla(w, c, 10000 + 10 * tensor++, lw);
    } else {
      const auto qkv =
          FusedViews<3>(w, s, tensor++, {q, kv, kv}, d, 2.0f / std::sqrt(static_cast<float>(d)));
      lw.q = qkv[0];
      lw.k = qkv[1];
      lw.v = qkv[2];
    }
    const int64_t o_in = int64_t{c.num_heads} * c.attn_out_head_dim();
    lw.o = FusedViews<1>(w, s, tensor++, {d}, o_in, 1.0f / std::sqrt(static_cast<float>(o_in)))[0];
    lw.ffn_norm = Norm(s, tensor++, d);
    const int64_t f = c.dense_ffn_dim(l);
    if (f > 0) {
      const auto gu =
          FusedViews<2>(w, s, tensor, {f, f}, d, 1.0f / std::sqrt(static_cast<float>(d)));
      lw.gate = gu[0];
      lw.up = gu[1];
      lw.down = FusedViews<1>(w, s, tensor + 1, {d}, f, 1.0f / std::sqrt(static_cast<float>(f)))[0];
    }
    tensor += 2;
    if (c.is_moe_layer(l)) GenerateExperts(w, c, l, lw);
    if (c.attention_bias) {
      lw.q_bias = Fill(s, 1000 + tensor, q, 0.1f);
      lw.k_bias = Fill(s, 2000 + tensor, kv, 0.1f);
      lw.v_bias = Fill(s, 3000 + tensor, kv, 0.1f);
    }
    if (c.qk_norm) {
      lw.q_norm = Norm(s, 4000 + tensor, c.head_dim);
      lw.k_norm = Norm(s, 5000 + tensor, c.head_dim);
    }
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = Norm(s, 2, d);
  if (c.tie_embeddings) {
    w.lm_head = w.embed;
    return w;
  }
  w.lm_head = FusedViews<1>(w, s, 3, {vocab}, d, 3.0f / std::sqrt(static_cast<float>(d)))[0];
  float* head = const_cast<float*>(reinterpret_cast<const float*>(w.lm_head.data));
  for (int32_t t = 0; t < c.vocab_size; ++t) {
    if (c.vocab_size <= 256 + 8 && !Printable(t)) std::fill(head + t * d, head + (t + 1) * d, 0.0f);
  }
  return w;
}

}  // namespace kvferry::engine
