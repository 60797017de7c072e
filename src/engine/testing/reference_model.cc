#include "engine/testing/reference_model.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvferry::engine {

namespace {

using Vec = std::vector<double>;

Vec ToDouble(const float* data, int64_t n) { return Vec(data, data + n); }

// y[o] = sum over i of w[o][i] * x[i]; w is [out][x.size()] row-major.
Vec Linear(const Vec& w, const Vec& x, int64_t out) {
  const int64_t in = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const double* row = w.data() + o * in;
    double s = 0.0;
    for (int64_t i = 0; i < in; ++i) s += row[i] * x[i];
    y[o] = s;
  }
  return y;
}

Vec RmsNorm(const Vec& x, const Vec& weight, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * weight[i];
  return y;
}

// theta^(-2i/D) for i < D/2. Rope scaling (linear, NTK, YaRN, llama3) would rescale these.
Vec RopeInverseFrequencies(const ModelConfig& c) {
  Vec inv(static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = std::pow(static_cast<double>(c.rope_theta),
                      -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
  }
  return inv;
}

// "Rotate half": element i pairs with element i + D/2 of the same head.
void Rope(const Vec& inv_freq, int32_t pos, double* head) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

// The q, k, v of one position. Qwen2's biases would be added here.
struct Qkv {
  Vec q, k, v;
};
Qkv ProjectQkv(const ReferenceLayer& layer, const Vec& h, const ModelConfig& c) {
  const int64_t qw = int64_t{c.num_heads} * c.head_dim;
  const int64_t kvw = int64_t{c.num_kv_heads} * c.head_dim;
  return {Linear(layer.wq, h, qw), Linear(layer.wk, h, kvw), Linear(layer.wv, h, kvw)};
}

// Softmax attention of one query head over positions 0..n-1 of `k`, `v` ([pos][kv head][D]).
void Attend(const double* q, const Vec& k, const Vec& v, int32_t n, int32_t kv_head,
            const ModelConfig& c, double* out) {
  const int32_t d = c.head_dim;
  const int64_t stride = int64_t{c.num_kv_heads} * d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Vec scores(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) {
    const double* kt = k.data() + t * stride + int64_t{kv_head} * d;
    double s = 0.0;
    for (int32_t i = 0; i < d; ++i) s += q[i] * kt[i];
    scores[t] = s * scale;
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  std::fill(out, out + d, 0.0);
  for (int32_t t = 0; t < n; ++t) {
    const double e = std::exp(scores[t] - max);
    sum += e;
    const double* vt = v.data() + t * stride + int64_t{kv_head} * d;
    for (int32_t i = 0; i < d; ++i) out[i] += e * vt[i];
  }
  for (int32_t i = 0; i < d; ++i) out[i] /= sum;
}

Status CheckSize(const std::vector<float>& t, int64_t want, const std::string& name) {
  if (static_cast<int64_t>(t.size()) == want) return Status::Ok();
  return InvalidArgumentError("reference model: " + name + " has " + std::to_string(t.size()) +
                              " values, want " + std::to_string(want));
}

}  // namespace

StatusOr<ReferenceModel> ReferenceModel::Create(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  KVF_RETURN_IF_ERROR(c.Validate());
  const int64_t d = c.hidden_dim, f = c.ffn_dim, v = c.vocab_size;
  const int64_t qw = int64_t{c.num_heads} * c.head_dim;
  const int64_t kvw = int64_t{c.num_kv_heads} * c.head_dim;
  KVF_RETURN_IF_ERROR(CheckSize(w.embed, v * d, "embed"));
  KVF_RETURN_IF_ERROR(CheckSize(w.final_norm, d, "final_norm"));
  KVF_RETURN_IF_ERROR(CheckSize(w.lm_head, c.tie_embeddings ? 0 : v * d, "lm_head"));
  if (static_cast<int32_t>(w.layers.size()) != c.num_layers) {
    return InvalidArgumentError("reference model: layer count differs from the config");
  }
  ReferenceModel m;
  m.config_ = c;
  m.embed_ = ToDouble(w.embed.data(), v * d);
  m.final_norm_ = ToDouble(w.final_norm.data(), d);
  m.lm_head_ = ToDouble(w.lm_head_data(), v * d);
  m.inv_freq_ = RopeInverseFrequencies(c);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string at = " of layer " + std::to_string(l);
    KVF_RETURN_IF_ERROR(CheckSize(lw.attn_norm, d, "attn_norm" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.qkv, (qw + 2 * kvw) * d, "qkv" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.o, d * qw, "o" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.ffn_norm, d, "ffn_norm" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.gate_up, 2 * f * d, "gate_up" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.down, d * f, "down" + at));
    // weights.h: qkv holds the rows of q_proj, k_proj, v_proj; gate_up those of gate, up.
    ReferenceLayer layer;
    layer.attn_norm = ToDouble(lw.attn_norm.data(), d);
    layer.wq = ToDouble(lw.qkv.data(), qw * d);
    layer.wk = ToDouble(lw.qkv.data() + qw * d, kvw * d);
    layer.wv = ToDouble(lw.qkv.data() + (qw + kvw) * d, kvw * d);
    layer.wo = ToDouble(lw.o.data(), d * qw);
    layer.ffn_norm = ToDouble(lw.ffn_norm.data(), d);
    layer.w_gate = ToDouble(lw.gate_up.data(), f * d);
    layer.w_up = ToDouble(lw.gate_up.data() + f * d, f * d);
    layer.w_down = ToDouble(lw.down.data(), d * f);
    m.layers_.push_back(std::move(layer));
  }
  return m;
}

Status ReferenceModel::CheckTokens(std::span<const int32_t> tokens) const {
  if (tokens.empty()) return InvalidArgumentError("reference model: empty sequence");
  if (static_cast<int64_t>(tokens.size()) > config_.max_position) {
    return InvalidArgumentError("reference model: sequence longer than max_position");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return InvalidArgumentError("reference model: token " + std::to_string(t) +
                                  " outside the vocabulary");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<std::vector<double>>> ReferenceModel::Logits(
    std::span<const int32_t> tokens) const {
  KVF_RETURN_IF_ERROR(CheckTokens(tokens));
  return Run(tokens, /*all=*/true);
}

StatusOr<std::vector<double>> ReferenceModel::LastLogits(std::span<const int32_t> tokens) const {
  KVF_RETURN_IF_ERROR(CheckTokens(tokens));
  return std::move(Run(tokens, /*all=*/false).back());
}

std::vector<std::vector<double>> ReferenceModel::Run(std::span<const int32_t> tokens,
                                                     bool all) const {
  const int64_t d = config_.hidden_dim;
  std::vector<SequenceKv> kv(layers_.size());
  std::vector<std::vector<double>> logits;
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (int32_t pos = 0; pos < n; ++pos) {
    Vec x(embed_.begin() + tokens[pos] * d, embed_.begin() + (tokens[pos] + 1) * d);
    for (size_t l = 0; l < layers_.size(); ++l) {
      AttentionBlock(layers_[l], pos, kv[l], x);
      MlpBlock(layers_[l], x);
    }
    if (all || pos == n - 1) logits.push_back(Head(x));
  }
  return logits;
}

void ReferenceModel::AttentionBlock(const ReferenceLayer& layer, int32_t pos, SequenceKv& kv,
                                    std::vector<double>& x) const {
  const ModelConfig& c = config_;
  const int32_t d = c.head_dim;
  Qkv p = ProjectQkv(layer, RmsNorm(x, layer.attn_norm, c.rms_norm_eps), c);
  for (int32_t h = 0; h < c.num_heads; ++h) Rope(inv_freq_, pos, p.q.data() + h * d);
  for (int32_t h = 0; h < c.num_kv_heads; ++h) Rope(inv_freq_, pos, p.k.data() + h * d);
  kv.k.insert(kv.k.end(), p.k.begin(), p.k.end());
  kv.v.insert(kv.v.end(), p.v.begin(), p.v.end());
  const int32_t group = c.num_heads / c.num_kv_heads;
  Vec attn(p.q.size());
  for (int32_t h = 0; h < c.num_heads; ++h) {
    Attend(p.q.data() + h * d, kv.k, kv.v, pos + 1, h / group, c, attn.data() + h * d);
  }
  const Vec o = Linear(layer.wo, attn, c.hidden_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

void ReferenceModel::MlpBlock(const ReferenceLayer& layer, std::vector<double>& x) const {
  const Vec h = RmsNorm(x, layer.ffn_norm, config_.rms_norm_eps);
  Vec gate = Linear(layer.w_gate, h, config_.ffn_dim);
  const Vec up = Linear(layer.w_up, h, config_.ffn_dim);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  const Vec down = Linear(layer.w_down, gate, config_.hidden_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
}

std::vector<double> ReferenceModel::Head(const std::vector<double>& x) const {
  return Linear(lm_head_, RmsNorm(x, final_norm_, config_.rms_norm_eps), config_.vocab_size);
}

}  // namespace kvferry::engine
