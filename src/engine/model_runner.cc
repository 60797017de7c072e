#include "engine/model_runner.h"

#include <cmath>
#include <cstring>

#include "engine/kernels/attention.h"
#include "engine/kernels/kv_store.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/rmsnorm.h"
#include "engine/kernels/swiglu.h"
#include "engine/thread_pool.h"

namespace kvferry::engine {

ModelRunner::ModelRunner(const ModelWeights* weights, kv::KvCache* cache, int32_t max_position,
                         ThreadPool* pool)
    : weights_(weights),
      cache_(cache),
      pool_(pool),
      rope_(weights->config.head_dim, max_position, weights->config.rope_theta,
            RopeFrequencyFactors(weights->config.rope_scaling, weights->config.head_dim,
                                 weights->config.rope_theta)) {}

void ModelRunner::PrepareQk(const LayerWeights& lw, float* row) const {
  const ModelConfig& c = weights_->config;
  const int64_t qw = int64_t{c.num_heads} * c.head_dim;
  const int64_t kvw = int64_t{c.num_kv_heads} * c.head_dim;
  if (c.attention_bias) {
    for (int64_t i = 0; i < qw; ++i) row[i] += lw.q_bias[i];
    for (int64_t i = 0; i < kvw; ++i) row[qw + i] += lw.k_bias[i];
    for (int64_t i = 0; i < kvw; ++i) row[qw + kvw + i] += lw.v_bias[i];
  }
  if (c.qk_norm) {
    kernels::RmsNorm(row, c.num_heads, c.head_dim, lw.q_norm.data(), c.rms_norm_eps, row);
    kernels::RmsNorm(row + qw, c.num_kv_heads, c.head_dim, lw.k_norm.data(), c.rms_norm_eps,
                     row + qw);
  }
}

void ModelRunner::Forward(std::span<const ForwardChunk> chunks, std::vector<float>* logits) {
  const ModelConfig& c = weights_->config;
  const int64_t d = c.hidden_dim;
  const int32_t hd = c.head_dim;
  const int64_t qw = int64_t{c.num_heads} * hd;
  const int64_t kvw = int64_t{c.num_kv_heads} * hd;
  const int64_t qkvw = qw + 2 * kvw;
  const int64_t f = c.ffn_dim;

  int64_t rows = 0;
  std::vector<kernels::AttentionSequence> seqs;
  seqs.reserve(chunks.size());
  for (const ForwardChunk& ch : chunks) {
    seqs.push_back(
        {ch.kernel_table.data(), ch.first_pos, static_cast<int32_t>(ch.tokens.size()), rows});
    rows += static_cast<int64_t>(ch.tokens.size());
  }
  logits->clear();
  if (rows == 0) return;

  x_.resize(rows * d);
  h_.resize(rows * d);
  qkv_.resize(rows * qkvw);
  q_.resize(rows * qw);
  attn_.resize(rows * qw);
  proj_.resize(rows * d);
  gu_.resize(rows * 2 * f);
  act_.resize(rows * f);
  positions_.resize(rows);

  {
    int64_t r = 0;
    for (const ForwardChunk& ch : chunks) {
      for (size_t i = 0; i < ch.tokens.size(); ++i, ++r) {
        ReadRowF32(weights_->embed, ch.tokens[i], &x_[r * d]);
        positions_[r] = ch.first_pos + static_cast<int32_t>(i);
      }
    }
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = weights_->layers[l];
    kernels::RmsNorm(x_.data(), rows, d, lw.attn_norm.data(), c.rms_norm_eps, h_.data());
    kernels::MatMul(h_.data(), rows, d, lw.qkv(), qkv_.data(), pool_);
    const kernels::KvLayerView view = kernels::LayerView(*cache_, l);
    {
      int64_t r = 0;
      for (const kernels::AttentionSequence& s : seqs) {
        for (int32_t i = 0; i < s.num_queries; ++i, ++r) {
          float* row = &qkv_[r * qkvw];
          PrepareQk(lw, row);
          kernels::ApplyRope(rope_, positions_[r], row, c.num_heads);
          kernels::ApplyRope(rope_, positions_[r], row + qw, c.num_kv_heads);
          std::memcpy(&q_[r * qw], row, sizeof(float) * qw);
          kernels::StoreKv(view, s.kernel_table, positions_[r], row + qw, row + qw + kvw);
        }
      }
    }
    kernels::Attention(view, seqs, q_.data(), c.num_heads, scale, attn_.data(), pool_);
    kernels::MatMul(attn_.data(), rows, qw, {&lw.o, 1}, proj_.data(), pool_);
    for (int64_t i = 0; i < rows * d; ++i) x_[i] += proj_[i];
    kernels::RmsNorm(x_.data(), rows, d, lw.ffn_norm.data(), c.rms_norm_eps, h_.data());
    kernels::MatMul(h_.data(), rows, d, lw.gate_up(), gu_.data(), pool_);
    kernels::SwiGlu(gu_.data(), rows, f, act_.data());
    kernels::MatMul(act_.data(), rows, f, {&lw.down, 1}, proj_.data(), pool_);
    for (int64_t i = 0; i < rows * d; ++i) x_[i] += proj_[i];
  }

  // Final norm and lm_head for the last row of each chunk that wants logits.
  int64_t num_out = 0;
  last_.clear();
  for (const kernels::AttentionSequence& s : seqs) {
    const size_t idx = &s - seqs.data();
    if (!chunks[idx].want_logits || s.num_queries == 0) continue;
    const int64_t r = s.first_row + s.num_queries - 1;
    last_.insert(last_.end(), x_.begin() + r * d, x_.begin() + (r + 1) * d);
    ++num_out;
  }
  if (num_out == 0) return;
  kernels::RmsNorm(last_.data(), num_out, d, weights_->final_norm.data(), c.rms_norm_eps,
                   last_.data());
  logits->resize(num_out * c.vocab_size);
  kernels::MatMul(last_.data(), num_out, d, {&weights_->lm_head, 1}, logits->data(), pool_);
}

}  // namespace kvferry::engine
