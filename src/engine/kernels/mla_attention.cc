#include "engine/kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {

namespace {

struct MlaScratch {
  std::vector<float> rows, scores, acc, max, sum;
};

// One query row (position p), all heads.
void RunRow(const KvLayerView& view, const AttentionSequence& s, int32_t query, const float* q_cat,
            int32_t num_heads, int32_t latent_dim, float scale, float* out, MlaScratch& sc) {
  const int32_t d = view.head_dim;
  const int32_t p = s.first_pos + query;
  const int64_t row = s.first_row + query;
  sc.rows.resize(static_cast<size_t>(kAttentionChunk) * d);
  sc.scores.resize(kAttentionChunk);
  sc.acc.assign(static_cast<size_t>(num_heads) * latent_dim, 0.0f);
  sc.max.assign(num_heads, -std::numeric_limits<float>::infinity());
  sc.sum.assign(num_heads, 0.0f);

  for (int32_t j0 = 0; j0 <= p; j0 += kAttentionChunk) {
    const int32_t n = std::min(kAttentionChunk, p + 1 - j0);
    for (int32_t j = 0; j < n; ++j) {
      LoadHead(view, view.k, s.kernel_table, j0 + j, 0, sc.rows.data() + j * d);
    }
    for (int32_t h = 0; h < num_heads; ++h) {
      const float* qh = q_cat + (row * num_heads + h) * d;
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < n; ++j) {
        sc.scores[j] = Dot(qh, sc.rows.data() + j * d, d) * scale;
        chunk_max = std::max(chunk_max, sc.scores[j]);
      }
      const float m_new = std::max(sc.max[h], chunk_max);
      const float alpha = std::exp(sc.max[h] - m_new);
      float* acc = sc.acc.data() + static_cast<int64_t>(h) * latent_dim;
      float l = sc.sum[h] * alpha;
      for (int32_t i = 0; i < latent_dim; ++i) acc[i] *= alpha;
      for (int32_t j = 0; j < n; ++j) {
        const float e = std::exp(sc.scores[j] - m_new);
        l += e;
        const float* c = sc.rows.data() + j * d;
        for (int32_t i = 0; i < latent_dim; ++i) acc[i] += e * c[i];
      }
      sc.sum[h] = l;
      sc.max[h] = m_new;
    }
  }
  for (int32_t h = 0; h < num_heads; ++h) {
    float* o = out + (row * num_heads + h) * latent_dim;
    const float* acc = sc.acc.data() + static_cast<int64_t>(h) * latent_dim;
    for (int32_t i = 0; i < latent_dim; ++i) o[i] = acc[i] / sc.sum[h];
  }
}

}  // namespace

void MlaAttention(const KvLayerView& view, std::span<const AttentionSequence> seqs,
                  const float* q_cat, int32_t num_heads, int32_t latent_dim, float scale,
                  float* out, ThreadPool* pool) {
  struct Task {
    int32_t seq, query;
  };
  std::vector<Task> tasks;
  int64_t work = 0;  // key positions visited, summed over rows
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    for (int32_t i = 0; i < seqs[si].num_queries; ++i) {
      work += seqs[si].first_pos + i + 1;
      tasks.push_back({si, i});
    }
  }
  auto body = [&](int64_t begin, int64_t end) {
    MlaScratch sc;
    for (int64_t t = begin; t < end; ++t) {
      RunRow(view, seqs[tasks[t].seq], tasks[t].query, q_cat, num_heads, latent_dim, scale, out,
             sc);
    }
  };
  // Small problems run inline; the result is the same either way (rows share no reduction).
  if (pool == nullptr || work < 1024) {
    body(0, static_cast<int64_t>(tasks.size()));
  } else {
    pool->ParallelFor(static_cast<int64_t>(tasks.size()), 1, body);
  }
}

}  // namespace kvferry::engine::kernels
