#include "engine/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {

namespace {

struct Task {
  int32_t seq;
  int32_t query;  // index within the sequence's run
  int32_t kv_head;
};

// Scratch of one worker range.
struct Scratch {
  std::vector<float> keys, values, scores, acc, max, sum;
};

void RunTask(const KvLayerView& view, const AttentionSequence& s, int32_t query, int32_t kv_head,
             const float* q, int32_t num_heads, float scale, float* out, Scratch& sc) {
  const int32_t d = view.head_dim;
  const int32_t group = num_heads / view.num_kv_heads;
  const int32_t row_width = num_heads * d;
  const int32_t p = s.first_pos + query;
  const int64_t row = s.first_row + query;
  const float* qrow = q + row * row_width;
  sc.keys.resize(static_cast<size_t>(kAttentionChunk) * d);
  sc.values.resize(sc.keys.size());
  sc.scores.resize(static_cast<size_t>(kAttentionChunk) * group);
  sc.acc.assign(static_cast<size_t>(group) * d, 0.0f);
  sc.max.assign(group, -std::numeric_limits<float>::infinity());
  sc.sum.assign(group, 0.0f);

  for (int32_t j0 = 0; j0 <= p; j0 += kAttentionChunk) {
    const int32_t n = std::min(kAttentionChunk, p + 1 - j0);
    for (int32_t j = 0; j < n; ++j) {
      LoadHead(view, view.k, s.kernel_table, j0 + j, kv_head, sc.keys.data() + j * d);
      LoadHead(view, view.v, s.kernel_table, j0 + j, kv_head, sc.values.data() + j * d);
    }
    for (int32_t g = 0; g < group; ++g) {
      const float* qh = qrow + static_cast<int64_t>(kv_head * group + g) * d;
      float* sg = sc.scores.data() + g * kAttentionChunk;
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < n; ++j) {
        sg[j] = Dot(qh, sc.keys.data() + j * d, d) * scale;
        chunk_max = std::max(chunk_max, sg[j]);
      }
      const float m_new = std::max(sc.max[g], chunk_max);
      const float alpha = std::exp(sc.max[g] - m_new);
      float* acc = sc.acc.data() + g * d;
      float l = sc.sum[g] * alpha;
      for (int32_t i = 0; i < d; ++i) acc[i] *= alpha;
      for (int32_t j = 0; j < n; ++j) {
        const float e = std::exp(sg[j] - m_new);
        l += e;
        const float* vj = sc.values.data() + j * d;
        for (int32_t i = 0; i < d; ++i) acc[i] += e * vj[i];
      }
      sc.sum[g] = l;
      sc.max[g] = m_new;
    }
  }
  for (int32_t g = 0; g < group; ++g) {
    float* o = out + row * row_width + static_cast<int64_t>(kv_head * group + g) * d;
    const float* acc = sc.acc.data() + g * d;
    for (int32_t i = 0; i < d; ++i) o[i] = acc[i] / sc.sum[g];
  }
}

}  // namespace

void Attention(const KvLayerView& view, std::span<const AttentionSequence> seqs, const float* q,
               int32_t num_heads, float scale, float* out, ThreadPool* pool) {
  std::vector<Task> tasks;
  int64_t work = 0;  // key positions visited, summed over tasks
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    for (int32_t i = 0; i < seqs[si].num_queries; ++i) {
      work += int64_t{seqs[si].first_pos + i + 1} * view.num_kv_heads;
      for (int32_t h = 0; h < view.num_kv_heads; ++h) tasks.push_back({si, i, h});
    }
  }
  auto body = [&](int64_t begin, int64_t end) {
    Scratch sc;
    for (int64_t t = begin; t < end; ++t) {
      const Task& task = tasks[t];
      RunTask(view, seqs[task.seq], task.query, task.kv_head, q, num_heads, scale, out, sc);
    }
  };
  // Small problems (a short decode step) run inline: a hand-off to the workers costs more.
  // The result is the same either way: tasks never share a reduction.
  if (pool == nullptr || work < 4096) {
    body(0, static_cast<int64_t>(tasks.size()));
  } else {
    pool->ParallelFor(static_cast<int64_t>(tasks.size()), 1, body);
  }
}

void AttentionReference(const KvLayerView& view, std::span<const AttentionSequence> seqs,
                        const float* q, int32_t num_heads, float scale, float* out) {
  const int32_t d = view.head_dim;
  const int32_t group = num_heads / view.num_kv_heads;
  std::vector<float> k(d), v(d), scores;
  for (const AttentionSequence& s : seqs) {
    for (int32_t i = 0; i < s.num_queries; ++i) {
      const int32_t p = s.first_pos + i;
      const int64_t row = s.first_row + i;
      for (int32_t h = 0; h < num_heads; ++h) {
        const int32_t kvh = h / group;
        const float* qh = q + row * num_heads * d + static_cast<int64_t>(h) * d;
        scores.assign(p + 1, 0.0f);
        float mx = -std::numeric_limits<float>::infinity();
        for (int32_t j = 0; j <= p; ++j) {
          LoadHead(view, view.k, s.kernel_table, j, kvh, k.data());
          double dot = 0;
          for (int32_t e = 0; e < d; ++e) dot += static_cast<double>(qh[e]) * k[e];
          scores[j] = static_cast<float>(dot) * scale;
          mx = std::max(mx, scores[j]);
        }
        std::vector<double> acc(d, 0.0);
        double sum = 0;
        for (int32_t j = 0; j <= p; ++j) {
          const double e = std::exp(static_cast<double>(scores[j]) - mx);
          sum += e;
          LoadHead(view, view.v, s.kernel_table, j, kvh, v.data());
          for (int32_t x = 0; x < d; ++x) acc[x] += e * v[x];
        }
        float* o = out + row * num_heads * d + static_cast<int64_t>(h) * d;
        for (int32_t x = 0; x < d; ++x) o[x] = static_cast<float>(acc[x] / sum);
      }
    }
  }
}

}  // namespace kvferry::engine::kernels
