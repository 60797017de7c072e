#include "engine/testing/reference_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/testing/reference_ops.h"

namespace kvferry::engine {

namespace {

using Vec = std::vector<double>;

}  // namespace

std::vector<double> ReferenceToDouble(const float* data, int64_t n) { return Vec(data, data + n); }

std::vector<double> ReferenceLinear(const std::vector<double>& w, const std::vector<double>& x,
                                    int64_t out) {
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

std::vector<double> ReferenceRmsNorm(const std::vector<double>& x,
                                     const std::vector<double>& weight, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * weight[i];
  return y;
}

namespace {

Vec ToDouble(const float* data, int64_t n) { return ReferenceToDouble(data, n); }
Vec Linear(const Vec& w, const Vec& x, int64_t out) { return ReferenceLinear(w, x, out); }
Vec RmsNorm(const Vec& x, const Vec& weight, double eps) {
  return ReferenceRmsNorm(x, weight, eps);
}

// DeepSeek's yarn, as its modeling code writes it: inv_freq = freq_inter * (1 - mask) +
// freq_extra * mask, mask = 1 - linear_ramp(low, high), freq_inter = freq_extra / factor.
double YarnFrequency(const RopeScaling& r, double freq_extra, size_t i, int32_t dim, double base) {
  auto find_dim = [&](double rotations) {
    return (dim * std::log(r.original_max_position / (rotations * 2 * M_PI))) /
           (2 * std::log(base));
  };
  const double low = std::max(std::floor(find_dim(r.beta_fast)), 0.0);
  double high = std::min(std::ceil(find_dim(r.beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / (high - low)));
  const double mask = 1.0 - ramp;
  return freq_extra / r.factor * (1.0 - mask) + freq_extra * mask;
}

// theta^(-2i/D) for i < D/2 (D: the rotated width), divided as the model's rope scaling
// says: yarn as above; linear by `factor`; llama3 (Hugging Face's _compute_llama3_parameters,
// written out here in double) by `factor` for long wavelengths, not at all for short ones, and a
// smooth blend in between; or by the given per-frequency factors.
Vec RopeInverseFrequencies(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  const int32_t dim = c.rope_dim();
  Vec inv(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    double f = std::pow(static_cast<double>(c.rope_theta),
                        -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    if (r.type == RopeScaling::Type::kYarn) f = YarnFrequency(r, f, i, dim, c.rope_theta);
    if (r.type == RopeScaling::Type::kLinear) f /= r.factor;
    if (r.type == RopeScaling::Type::kFactors) f /= r.freq_factors[i];
    if (r.type == RopeScaling::Type::kLlama3) {
      const double wavelen = 2.0 * M_PI / f;
      const double low = r.original_max_position / static_cast<double>(r.low_freq_factor);
      const double high = r.original_max_position / static_cast<double>(r.high_freq_factor);
      if (wavelen > low) {
        f /= r.factor;
      } else if (wavelen >= high) {
        const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        f = (1.0 - smooth) * f / r.factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

}  // namespace

// "Rotate half": element i pairs with element i + D/2 of the same head.
void ReferenceRope(const std::vector<double>& inv_freq, int32_t pos, double* head) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

namespace {

// The q, k, v of one position, with Qwen2's biases when the model has them.
struct Qkv {
  Vec q, k, v;
};
Qkv ProjectQkv(const ReferenceLayer& layer, const Vec& h, const ModelConfig& c) {
  const int64_t qw = int64_t{c.num_heads} * c.head_dim;
  const int64_t kvw = int64_t{c.num_kv_heads} * c.head_dim;
  Qkv p{Linear(layer.wq, h, qw), Linear(layer.wk, h, kvw), Linear(layer.wv, h, kvw)};
  if (c.attention_bias) {
    for (int64_t i = 0; i < qw; ++i) p.q[i] += layer.q_bias[i];
    for (int64_t i = 0; i < kvw; ++i) p.k[i] += layer.k_bias[i];
    for (int64_t i = 0; i < kvw; ++i) p.v[i] += layer.v_bias[i];
  }
  return p;
}

// Qwen3: each head of q (or k) RMS-normalised over its D values with `weight`.
void NormHeads(Vec& x, int32_t heads, const Vec& weight, double eps) {
  const size_t d = weight.size();
  for (int32_t h = 0; h < heads; ++h) {
    const Vec head(x.begin() + h * d, x.begin() + (h + 1) * d);
    const Vec normed = RmsNorm(head, weight, eps);
    std::copy(normed.begin(), normed.end(), x.begin() + h * d);
  }
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

}  // namespace

Status ReferenceCheckSize(const std::vector<float>& t, int64_t want, const std::string& name) {
  if (static_cast<int64_t>(t.size()) == want) return Status::Ok();
  return InvalidArgumentError("reference model: " + name + " has " + std::to_string(t.size()) +
                              " values, want " + std::to_string(want));
}

StatusOr<std::vector<double>> ReferenceMatrix(const WeightMatrix& m, int64_t rows, int64_t cols,
                                              const std::string& name) {
  if (m.rows != rows || m.cols != cols) {
    return InvalidArgumentError("reference model: " + name + " is " + std::to_string(m.rows) +
                                " x " + std::to_string(m.cols) + ", want " + std::to_string(rows) +
                                " x " + std::to_string(cols));
  }
  const std::vector<float> f = ToF32(m);
  return ReferenceToDouble(f.data(), rows * cols);
}

namespace {
Status CheckSize(const std::vector<float>& t, int64_t want, const std::string& name) {
  return ReferenceCheckSize(t, want, name);
}
StatusOr<Vec> Matrix(const WeightMatrix& m, int64_t rows, int64_t cols, const std::string& name) {
  return ReferenceMatrix(m, rows, cols, name);
}
}  // namespace

StatusOr<ReferenceModel> ReferenceModel::Create(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  KVF_RETURN_IF_ERROR(c.Validate());
  const int64_t d = c.hidden_dim, f = c.ffn_dim, v = c.vocab_size;
  const int64_t qw = int64_t{c.num_heads} * c.head_dim;
  const int64_t kvw = int64_t{c.num_kv_heads} * c.head_dim;
  KVF_RETURN_IF_ERROR(CheckSize(w.final_norm, d, "final_norm"));
  if (static_cast<int32_t>(w.layers.size()) != c.num_layers) {
    return InvalidArgumentError("reference model: layer count differs from the config");
  }
  ReferenceModel m;
  m.config_ = c;
  KVF_ASSIGN_OR_RETURN(m.embed_, Matrix(w.embed, v, d, "embed"));
  m.final_norm_ = ToDouble(w.final_norm.data(), d);
  KVF_ASSIGN_OR_RETURN(m.lm_head_, Matrix(w.lm_head, v, d, "lm_head"));
  m.inv_freq_ = RopeInverseFrequencies(c);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string at = " of layer " + std::to_string(l);
    KVF_RETURN_IF_ERROR(CheckSize(lw.attn_norm, d, "attn_norm" + at));
    KVF_RETURN_IF_ERROR(CheckSize(lw.ffn_norm, d, "ffn_norm" + at));
    ReferenceLayer layer;
    layer.attn_norm = ToDouble(lw.attn_norm.data(), d);
    if (c.is_mla()) {
      KVF_RETURN_IF_ERROR(LoadMla(c, lw, at, layer));
    } else {
      KVF_ASSIGN_OR_RETURN(layer.wq, Matrix(lw.q, qw, d, "q" + at));
      KVF_ASSIGN_OR_RETURN(layer.wk, Matrix(lw.k, kvw, d, "k" + at));
      KVF_ASSIGN_OR_RETURN(layer.wv, Matrix(lw.v, kvw, d, "v" + at));
      KVF_ASSIGN_OR_RETURN(layer.wo, Matrix(lw.o, d, qw, "o" + at));
    }
    layer.ffn_norm = ToDouble(lw.ffn_norm.data(), d);
    KVF_ASSIGN_OR_RETURN(layer.w_gate, Matrix(lw.gate, f, d, "gate" + at));
    KVF_ASSIGN_OR_RETURN(layer.w_up, Matrix(lw.up, f, d, "up" + at));
    KVF_ASSIGN_OR_RETURN(layer.w_down, Matrix(lw.down, d, f, "down" + at));
    if (c.attention_bias) {
      KVF_RETURN_IF_ERROR(CheckSize(lw.q_bias, qw, "q_bias" + at));
      KVF_RETURN_IF_ERROR(CheckSize(lw.k_bias, kvw, "k_bias" + at));
      KVF_RETURN_IF_ERROR(CheckSize(lw.v_bias, kvw, "v_bias" + at));
      layer.q_bias = ToDouble(lw.q_bias.data(), qw);
      layer.k_bias = ToDouble(lw.k_bias.data(), kvw);
      layer.v_bias = ToDouble(lw.v_bias.data(), kvw);
    }
    if (c.qk_norm) {
      KVF_RETURN_IF_ERROR(CheckSize(lw.q_norm, c.head_dim, "q_norm" + at));
      KVF_RETURN_IF_ERROR(CheckSize(lw.k_norm, c.head_dim, "k_norm" + at));
      layer.q_norm = ToDouble(lw.q_norm.data(), c.head_dim);
      layer.k_norm = ToDouble(lw.k_norm.data(), c.head_dim);
    }
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
  if (c.is_mla()) {
    MlaAttentionBlock(layer, pos, kv, x);
    return;
  }
  const int32_t d = c.head_dim;
  Qkv p = ProjectQkv(layer, RmsNorm(x, layer.attn_norm, c.rms_norm_eps), c);
  if (c.qk_norm) {
    NormHeads(p.q, c.num_heads, layer.q_norm, c.rms_norm_eps);
    NormHeads(p.k, c.num_kv_heads, layer.k_norm, c.rms_norm_eps);
  }
  for (int32_t h = 0; h < c.num_heads; ++h) ReferenceRope(inv_freq_, pos, p.q.data() + h * d);
  for (int32_t h = 0; h < c.num_kv_heads; ++h) ReferenceRope(inv_freq_, pos, p.k.data() + h * d);
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
