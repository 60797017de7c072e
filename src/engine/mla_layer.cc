// ModelRunner::MlaAttentionBlock: one layer of multi-head latent attention (DeepSeek-V2/V3) with
// the key and value up-projections absorbed (docs/engine.md, "Multi-head latent attention").
//
// Per row (h = the normed residual):
//   q      = q_proj(h)  or  q_b(RmsNorm(q_a(h)))             [H][nope | rope]
//   kv     = kv_a(h)                                         [latent c | rope key]
//   c      = RmsNorm(c) (kv_a_norm); rope key = RoPE(rope key); the row is stored in the cache
//   q_cat  = [q_nope[h] k_absorb[h]^T | RoPE(q_rope[h])]     per head, [latent | rope]
//   o_lat  = MlaAttention(q_cat) over the cached rows          per head, [latent]
//   attn   = o_lat[h] v_up[h]^T                               per head, [v_head_dim]
// Every value is a canonical Dot (MatMul) or the attention kernel's fixed order: nothing
// depends on the batch, the chunking or the cache geometry. A tensor-parallel rank computes its
// query heads only (q_b / q_proj rows, k_absorb, v_up of its heads) and the whole latent, which
// every rank caches: each rank's cache is the same bits.
#include <cstring>

#include "engine/kernels/kv_store.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/mla_attention.h"
#include "engine/kernels/rmsnorm.h"
#include "engine/model_runner.h"

namespace kvferry::engine {

void ModelRunner::MlaAttentionBlock(int32_t l, std::span<const kernels::AttentionSequence> seqs,
                                    int64_t rows) {
  const ModelConfig& c = config();
  const MlaShape& m = c.mla;
  const LayerShard& lw = shard_->layers[l];
  const int64_t d = c.hidden_dim;
  const int32_t heads = shard_->shard.num_q_heads;  // this rank's query heads
  const int64_t qhd = c.head_dim;                   // nope + rope
  const int64_t lat = m.kv_lora_rank;
  const int64_t row_dim = c.kv_cache_head_dim();  // lat + rope

  q_.resize(rows * heads * qhd);
  if (m.q_lora_rank > 0) {
    qa_.resize(rows * m.q_lora_rank);
    kernels::MatMul(h_.data(), rows, d, {&lw.full->q_a, 1}, qa_.data(), pool_);
    kernels::RmsNorm(qa_.data(), rows, m.q_lora_rank, lw.full->q_a_norm.data(), c.rms_norm_eps,
                     qa_.data());
    kernels::MatMul(qa_.data(), rows, m.q_lora_rank, {&lw.q_b, 1}, q_.data(), pool_);
  } else {
    kernels::MatMul(h_.data(), rows, d, {&lw.q, 1}, q_.data(), pool_);
  }
  latent_.resize(rows * row_dim);
  kernels::MatMul(h_.data(), rows, d, {&lw.full->kv_a, 1}, latent_.data(), pool_);

  const kernels::KvLayerView view = kernels::MlaLayerView(*cache_, l);
  qcat_.resize(rows * heads * row_dim);
  int64_t r = 0;
  for (const kernels::AttentionSequence& s : seqs) {
    for (int32_t i = 0; i < s.num_queries; ++i, ++r) {
      float* kv = &latent_[r * row_dim];
      kernels::RmsNorm(kv, 1, lat, lw.full->kv_a_norm.data(), c.rms_norm_eps, kv);
      kernels::ApplyRope(*rope_, positions_[r], kv + lat, 1);
      kernels::StoreRow(view, s.kernel_table, positions_[r], kv);
      for (int32_t h = 0; h < heads; ++h) {
        float* qr = &q_[(r * heads + h) * qhd + m.qk_nope_head_dim];
        kernels::ApplyRope(*rope_, positions_[r], qr, 1);
        std::memcpy(&qcat_[(r * heads + h) * row_dim + lat], qr,
                    sizeof(float) * m.qk_rope_head_dim);
      }
    }
  }
  // Absorb each head's key up-projection into its query: q_nope[h] -> latent space.
  for (int32_t h = 0; h < heads; ++h) {
    kernels::MatMulStrided(&q_[h * qhd], rows, m.qk_nope_head_dim, heads * qhd,
                           {&lw.k_absorb[h], 1}, &qcat_[h * row_dim], heads * row_dim, pool_);
  }
  olat_.resize(rows * heads * lat);
  kernels::MlaAttention(view, seqs, qcat_.data(), heads, static_cast<int32_t>(lat),
                        c.softmax_scale(), olat_.data(), pool_);
  // Each head's value up-projection of its latent output.
  for (int32_t h = 0; h < heads; ++h) {
    kernels::MatMulStrided(&olat_[h * lat], rows, lat, heads * lat, {&lw.v_up[h], 1},
                           &attn_[h * m.v_head_dim], heads * m.v_head_dim, pool_);
  }
}

}  // namespace kvferry::engine
