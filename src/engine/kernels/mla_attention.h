// Causal multi-head latent attention over the paged MLA cache (internal; docs/engine.md,
// "Multi-head latent attention"). Called by ModelRunner for MLA models.
//
// The cache holds one row per token per layer: [latent c (latent_dim) | rotated rope key]
// (kv_store.h's MlaLayerView: one "KV head" of latent_dim + rope dim). With the key weights
// absorbed into the query, every query head h attends over those rows directly:
//   score_j = Dot(q_cat[h], row_j, latent_dim + rope_dim) * scale
//   out[h]  = sum_j softmax(score)_j * c_j             (the first latent_dim values of row_j)
// where q_cat[h] = [q_nope[h] absorbed into latent space | rotated q_rope[h]].
//
// Determinism: the same order as Attention (attention.h): keys in fixed chunks of
// kAttentionChunk positions [16c, 16c + 16) ∩ [0, p], per chunk the scores (one canonical Dot
// each), the chunk max, the rescale of (l, acc) by exp(M - M'), then e = exp(s - M'), l += e,
// acc += e * c in increasing position; out = acc / l. It depends only on the position p: not on
// the kernel block size, the layout, the batch or the thread count. Threads split query rows.
//
// The rows of the query tokens themselves must be stored (StoreRow) before the call.
//
// Thread-safety: reads the cache, writes `out`; `pool` may be null.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kernels/attention.h"
#include "engine/kernels/kv_store.h"

namespace kvferry::engine::kernels {

// q_cat: [rows][num_heads][view.head_dim]; out: [rows][num_heads][latent_dim].
void MlaAttention(const KvLayerView& view, std::span<const AttentionSequence> seqs,
                  const float* q_cat, int32_t num_heads, int32_t latent_dim, float scale,
                  float* out, ThreadPool* pool);

}  // namespace kvferry::engine::kernels
