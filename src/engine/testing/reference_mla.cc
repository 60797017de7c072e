// The reference model's multi-head latent attention (test-only; reference_model.h), written
// from DeepSeek-V2's definition in its expanded form: every head's keys and values are
// up-projected from the cached latents, then plain softmax attention — not the engine's
// absorbed form, so the two share no algebra beyond the model's.
#include <algorithm>
#include <cmath>

#include "engine/testing/reference_model.h"
#include "engine/testing/reference_ops.h"

namespace kvferry::engine {

Status ReferenceModel::LoadMla(const ModelConfig& c, const LayerWeights& lw, const std::string& at,
                               ReferenceLayer& layer) {
  const MlaShape& m = c.mla;
  const int64_t d = c.hidden_dim;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  if (m.q_lora_rank > 0) {
    KVF_ASSIGN_OR_RETURN(layer.wq_a, ReferenceMatrix(lw.q_a, m.q_lora_rank, d, "q_a" + at));
    KVF_RETURN_IF_ERROR(ReferenceCheckSize(lw.q_a_norm, m.q_lora_rank, "q_a_norm" + at));
    layer.q_a_norm = ReferenceToDouble(lw.q_a_norm.data(), m.q_lora_rank);
    KVF_ASSIGN_OR_RETURN(layer.wq_b, ReferenceMatrix(lw.q_b, q, m.q_lora_rank, "q_b" + at));
  } else {
    KVF_ASSIGN_OR_RETURN(layer.wq, ReferenceMatrix(lw.q, q, d, "q" + at));
  }
  KVF_ASSIGN_OR_RETURN(
      layer.wkv_a, ReferenceMatrix(lw.kv_a, m.kv_lora_rank + m.qk_rope_head_dim, d, "kv_a" + at));
  KVF_RETURN_IF_ERROR(ReferenceCheckSize(lw.kv_a_norm, m.kv_lora_rank, "kv_a_norm" + at));
  layer.kv_a_norm = ReferenceToDouble(lw.kv_a_norm.data(), m.kv_lora_rank);
  const int64_t kv_b_rows = int64_t{c.num_heads} * (m.qk_nope_head_dim + m.v_head_dim);
  KVF_ASSIGN_OR_RETURN(layer.wkv_b,
                       ReferenceMatrix(lw.kv_b, kv_b_rows, m.kv_lora_rank, "kv_b" + at));
  KVF_ASSIGN_OR_RETURN(layer.wo,
                       ReferenceMatrix(lw.o, d, int64_t{c.num_heads} * m.v_head_dim, "o" + at));
  return Status::Ok();
}

void ReferenceModel::MlaAttentionBlock(const ReferenceLayer& layer, int32_t pos, SequenceKv& kv,
                                       std::vector<double>& x) const {
  const ModelConfig& c = config_;
  const MlaShape& m = c.mla;
  const int64_t heads = c.num_heads, qhd = c.head_dim;
  const int64_t nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, vd = m.v_head_dim;
  const int64_t lat = m.kv_lora_rank;
  const std::vector<double> h = ReferenceRmsNorm(x, layer.attn_norm, c.rms_norm_eps);

  std::vector<double> q;
  if (m.q_lora_rank > 0) {
    const std::vector<double> qa = ReferenceRmsNorm(ReferenceLinear(layer.wq_a, h, m.q_lora_rank),
                                                    layer.q_a_norm, c.rms_norm_eps);
    q = ReferenceLinear(layer.wq_b, qa, heads * qhd);
  } else {
    q = ReferenceLinear(layer.wq, h, heads * qhd);
  }
  for (int64_t j = 0; j < heads; ++j) ReferenceRope(inv_freq_, pos, q.data() + j * qhd + nope);

  const std::vector<double> ckv = ReferenceLinear(layer.wkv_a, h, lat + rope);
  const std::vector<double> c_t = ReferenceRmsNorm(
      std::vector<double>(ckv.begin(), ckv.begin() + lat), layer.kv_a_norm, c.rms_norm_eps);
  std::vector<double> k_rope(ckv.begin() + lat, ckv.end());
  ReferenceRope(inv_freq_, pos, k_rope.data());
  kv.k.insert(kv.k.end(), c_t.begin(), c_t.end());
  kv.v.insert(kv.v.end(), k_rope.begin(), k_rope.end());

  // Expand every cached latent into each head's key and value: kv_b's rows per head are its
  // nope key rows, then its value rows.
  const int32_t n = pos + 1;
  // DeepSeek's softmax_scale: q_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2.
  double scale = 1.0 / std::sqrt(static_cast<double>(nope + rope));
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kYarn && r.factor > 1.0f) {
    const double mscale = 0.1 * r.mscale_all_dim * std::log(static_cast<double>(r.factor)) + 1.0;
    scale *= mscale * mscale;
  }
  std::vector<double> attn(static_cast<size_t>(heads * vd), 0.0);
  std::vector<double> scores(n), values(static_cast<size_t>(n * vd));
  for (int64_t j = 0; j < heads; ++j) {
    const double* qj = q.data() + j * qhd;
    const double* wk = layer.wkv_b.data() + j * (nope + vd) * lat;
    const double* wv = wk + nope * lat;
    for (int32_t t = 0; t < n; ++t) {
      const double* ct = kv.k.data() + t * lat;
      double s = 0.0;
      for (int64_t i = 0; i < nope; ++i) {
        double k = 0.0;
        for (int64_t e = 0; e < lat; ++e) k += wk[i * lat + e] * ct[e];
        s += qj[i] * k;
      }
      for (int64_t i = 0; i < rope; ++i) s += qj[nope + i] * kv.v[t * rope + i];
      scores[t] = s * scale;
      for (int64_t i = 0; i < vd; ++i) {
        double v = 0.0;
        for (int64_t e = 0; e < lat; ++e) v += wv[i * lat + e] * ct[e];
        values[t * vd + i] = v;
      }
    }
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0;
    for (int32_t t = 0; t < n; ++t) {
      const double e = std::exp(scores[t] - mx);
      sum += e;
      for (int64_t i = 0; i < vd; ++i) attn[j * vd + i] += e * values[t * vd + i];
    }
    for (int64_t i = 0; i < vd; ++i) attn[j * vd + i] /= sum;
  }
  const std::vector<double> o = ReferenceLinear(layer.wo, attn, c.hidden_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

}  // namespace kvferry::engine
