#include "engine/model_runner.h"

#include <cmath>
#include <cstring>

#include "engine/kernels/attention.h"
#include "engine/kernels/kv_store.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/rmsnorm.h"
#include "engine/kernels/row_parallel.h"
#include "engine/kernels/swiglu.h"
#include "engine/thread_pool.h"

namespace kvferry::engine {

int64_t NumLogitRows(std::span<const ForwardChunk> chunks) {
  int64_t n = 0;
  for (const ForwardChunk& ch : chunks) n += ch.want_logits && !ch.tokens.empty() ? 1 : 0;
  return n;
}

std::shared_ptr<const kernels::RopeTable> MakeRopeTable(const ModelConfig& c,
                                                        int32_t max_position) {
  return std::make_shared<const kernels::RopeTable>(
      c.rope_dim(), max_position, c.rope_theta,
      RopeFrequencyFactors(c.rope_scaling, c.rope_dim(), c.rope_theta));
}

ModelRunner::ModelRunner(const ModelShard* shard, TpCommunicator* comm,
                         std::shared_ptr<const kernels::RopeTable> rope, kv::KvCache* cache,
                         ThreadPool* pool)
    : shard_(shard), comm_(comm), cache_(cache), pool_(pool), rope_(std::move(rope)) {}

ModelRunner::ModelRunner(const ModelWeights* weights, kv::KvCache* cache, int32_t max_position,
                         ThreadPool* pool)
    : own_shard_(std::make_unique<ModelShard>(
          ShardWeights(*weights, PlanTensorParallel(weights->config, 1).value()[0]))),
      own_comm_(std::make_unique<TpCommunicator>(1)),
      shard_(own_shard_.get()),
      comm_(own_comm_.get()),
      cache_(cache),
      pool_(pool),
      rope_(MakeRopeTable(weights->config, max_position)) {}

void ModelRunner::PrepareQk(const LayerShard& lw, float* row) const {
  const ModelConfig& c = config();
  const RankShard& s = shard_->shard;
  const int64_t qw = int64_t{s.num_q_heads} * c.head_dim;
  const int64_t kvw = int64_t{s.num_kv_heads} * c.head_dim;
  if (c.attention_bias) {
    for (int64_t i = 0; i < qw; ++i) row[i] += lw.q_bias[i];
    for (int64_t i = 0; i < kvw; ++i) row[qw + i] += lw.k_bias[i];
    for (int64_t i = 0; i < kvw; ++i) row[qw + kvw + i] += lw.v_bias[i];
  }
  if (c.qk_norm) {
    kernels::RmsNorm(row, s.num_q_heads, c.head_dim, lw.full->q_norm.data(), c.rms_norm_eps, row);
    kernels::RmsNorm(row + qw, s.num_kv_heads, c.head_dim, lw.full->k_norm.data(), c.rms_norm_eps,
                     row + qw);
  }
}

void ModelRunner::RowParallelAdd(const float* in, int64_t rows, std::span<const int64_t> bounds,
                                 const WeightMatrix& w) {
  const int32_t rank = shard_->shard.rank;
  const int64_t n = rows * config().hidden_dim;
  float* partial = comm_->PartialBuffer(rank, n);
  kernels::RowParallelMatMul(in, rows, bounds, w, partial, &leaves_, pool_);
  comm_->AllReduceAdd(rank, n, x_.data());
}

void ModelRunner::FinishLayer(int32_t l, const LayerShard& lw, int64_t rows) {
  const ModelConfig& c = config();
  const RankShard& rs = shard_->shard;
  const int64_t d = c.hidden_dim;
  const bool moe = c.is_moe_layer(l);
  RowParallelAdd(attn_.data(), rows, rs.o_bounds, lw.o);
  kernels::RmsNorm(x_.data(), rows, d, lw.full->ffn_norm.data(), c.rms_norm_eps, h_.data());
  if (c.dense_ffn_dim(l) > 0) {
    const int64_t f = moe ? rs.shared_count : rs.ffn_count;
    gu_.resize(rows * 2 * f);
    act_.resize(rows * f);
    kernels::MatMul(h_.data(), rows, d, lw.gate_up(), gu_.data(), pool_);
    kernels::SwiGlu(gu_.data(), rows, f, act_.data());
    RowParallelAdd(act_.data(), rows, moe ? rs.shared_bounds : rs.down_bounds, lw.down);
  }
  if (moe) MoeBlock(lw, rows);
}

void ModelRunner::Forward(std::span<const ForwardChunk> chunks, std::vector<float>* logits) {
  logits->assign(static_cast<size_t>(NumLogitRows(chunks) * config().vocab_size), 0.0f);
  Forward(chunks, logits->data());
}

void ModelRunner::Forward(std::span<const ForwardChunk> chunks, float* logits) {
  const ModelConfig& c = config();
  int64_t rows = 0;
  std::vector<kernels::AttentionSequence> seqs;
  seqs.reserve(chunks.size());
  for (const ForwardChunk& ch : chunks) {
    seqs.push_back(
        {ch.kernel_table.data(), ch.first_pos, static_cast<int32_t>(ch.tokens.size()), rows});
    rows += static_cast<int64_t>(ch.tokens.size());
  }
  if (rows == 0) return;

  Embed(chunks, rows);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerShard& lw = shard_->layers[l];
    kernels::RmsNorm(x_.data(), rows, c.hidden_dim, lw.full->attn_norm.data(), c.rms_norm_eps,
                     h_.data());
    if (c.is_mla()) {
      MlaAttentionBlock(l, seqs, rows);
    } else {
      AttentionBlock(l, seqs, rows);
    }
    FinishLayer(l, lw, rows);
  }
  WriteLogits(chunks, seqs, logits);
}

void ModelRunner::Embed(std::span<const ForwardChunk> chunks, int64_t rows) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_dim;
  x_.resize(rows * d);
  h_.resize(rows * d);
  attn_.resize(rows * shard_->shard.num_q_heads * c.attn_out_head_dim());
  positions_.resize(rows);
  int64_t r = 0;
  for (const ForwardChunk& ch : chunks) {
    for (size_t i = 0; i < ch.tokens.size(); ++i, ++r) {
      ReadRowF32(shard_->full->embed, ch.tokens[i], &x_[r * d]);
      positions_[r] = ch.first_pos + static_cast<int32_t>(i);
    }
  }
}

void ModelRunner::AttentionBlock(int32_t l, std::span<const kernels::AttentionSequence> seqs,
                                 int64_t rows) {
  const ModelConfig& c = config();
  const RankShard& rs = shard_->shard;
  const LayerShard& lw = shard_->layers[l];
  const int64_t qw = int64_t{rs.num_q_heads} * c.head_dim;
  const int64_t kvw = int64_t{rs.num_kv_heads} * c.head_dim;
  const int64_t qkvw = qw + 2 * kvw;
  qkv_.resize(rows * qkvw);
  q_.resize(rows * qw);
  kernels::MatMul(h_.data(), rows, c.hidden_dim, lw.qkv(), qkv_.data(), pool_);
  const kernels::KvLayerView view = kernels::LayerView(*cache_, l);
  int64_t r = 0;
  for (const kernels::AttentionSequence& s : seqs) {
    for (int32_t i = 0; i < s.num_queries; ++i, ++r) {
      float* row = &qkv_[r * qkvw];
      PrepareQk(lw, row);
      kernels::ApplyRope(*rope_, positions_[r], row, rs.num_q_heads);
      kernels::ApplyRope(*rope_, positions_[r], row + qw, rs.num_kv_heads);
      std::memcpy(&q_[r * qw], row, sizeof(float) * qw);
      kernels::StoreKv(view, s.kernel_table, positions_[r], row + qw, row + qw + kvw);
    }
  }
  kernels::Attention(view, seqs, q_.data(), rs.num_q_heads, c.softmax_scale(), attn_.data(), pool_);
}

void ModelRunner::WriteLogits(std::span<const ForwardChunk> chunks,
                              std::span<const kernels::AttentionSequence> seqs, float* logits) {
  const ModelConfig& c = config();
  const RankShard& rs = shard_->shard;
  const int64_t d = c.hidden_dim;
  int64_t num_out = 0;
  last_.clear();
  for (const kernels::AttentionSequence& s : seqs) {
    const size_t idx = &s - seqs.data();
    if (!chunks[idx].want_logits || s.num_queries == 0) continue;
    const int64_t r = s.first_row + s.num_queries - 1;
    last_.insert(last_.end(), x_.begin() + r * d, x_.begin() + (r + 1) * d);
    ++num_out;
  }
  if (num_out == 0 || rs.vocab_count == 0) return;
  kernels::RmsNorm(last_.data(), num_out, d, shard_->full->final_norm.data(), c.rms_norm_eps,
                   last_.data());
  kernels::MatMulStrided(last_.data(), num_out, d, d, {&shard_->lm_head, 1},
                         logits + rs.vocab_first, c.vocab_size, pool_);
}

}  // namespace kvferry::engine
