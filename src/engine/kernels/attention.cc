#include "engine/kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {

namespace {

// Query rows of one sequence that share their key loads: consecutive positions, one KV head.
inline constexpr int32_t kQueryTile = 16;

struct Task {
  int32_t seq;
  int32_t query;  // first query of the tile, index within the sequence's run
  int32_t num_queries;
  int32_t kv_head;
  int32_t kv_heads = 1;  // heads kv_head .. kv_head + kv_heads - 1 (several: decode in place)
};

// Scratch of one worker range: one key chunk (shared by the tile's queries), and per query of
// the tile and head of the group, the running softmax state.
struct Scratch {
  std::vector<float> keys, values, scores, acc, max, sum;
};

// acc[i] = acc[i] * alpha, then for each key j in order acc[i] = fma(e[j], values[j][i], acc[i]):
// elementwise, so neither the vector width nor how the columns are blocked changes a bit (A:
// SoftFma or HwFma, the same bits). 64 columns at a time stay in registers over the chunk's keys,
// where stepping key by key loaded and stored the whole accumulator per key.
template <typename A>
inline __attribute__((always_inline)) void AccumulateValues(float* acc, float alpha, const float* e,
                                                            const float* const* values, int32_t n,
                                                            int32_t d) {
  constexpr int32_t kRegs = 8;
  const V8 a = Splat8(alpha);
  int32_t i = 0;
  for (; i + 8 * kRegs <= d; i += 8 * kRegs) {
    V8 r[kRegs];  // (unrolled, so that the array lives in registers)
#pragma GCC unroll 8
    for (int32_t k = 0; k < kRegs; ++k) r[k] = Load8(acc + i + 8 * k) * a;
    for (int32_t j = 0; j < n; ++j) {
      const V8 ev = Splat8(e[j]);
#pragma GCC unroll 8
      for (int32_t k = 0; k < kRegs; ++k) r[k] = A::Fma(ev, Load8(values[j] + i + 8 * k), r[k]);
    }
#pragma GCC unroll 8
    for (int32_t k = 0; k < kRegs; ++k) Store8(acc + i + 8 * k, r[k]);
  }
  for (; i + 8 <= d; i += 8) {
    V8 r = Load8(acc + i) * a;
    for (int32_t j = 0; j < n; ++j) r = A::Fma(Splat8(e[j]), Load8(values[j] + i), r);
    Store8(acc + i, r);
  }
  for (; i < d; ++i) {
    float r = acc[i] * alpha;
    for (int32_t j = 0; j < n; ++j) r = A::Fma1(e[j], values[j][i], r);
    acc[i] = r;
  }
}

// Eight keys' fused dots with the same query: eight chains, combined together (Combine8x8).
// Each result is exactly FusedDot(q, k[i], d).
template <typename A>
inline __attribute__((always_inline)) void Dot8(const float* q, const float* const* k, int32_t d,
                                                float* out) {
  const int32_t d8 = d & ~7;
  V8 a[8];  // (unrolled, so that the array lives in registers)
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) a[i] = Splat8(0.0f);
  for (int32_t x = 0; x < d8; x += 8) {
    const V8 vq = Load8(q + x);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) a[i] = A::Fma(vq, Load8(k[i] + x), a[i]);
  }
  Store8(out, Combine8x8(a));
  for (int32_t x = d8; x < d; ++x) {
    for (int i = 0; i < 8; ++i) out[i] = A::Fma1(q[x], k[i][x], out[i]);
  }
}

// Four keys' fused dots with the same query, interleaved: four independent chains where one
// FusedDot is a single chain bound by the FMA's latency. Each result is exactly
// FusedDot(q, k[i], d).
template <typename A>
inline __attribute__((always_inline)) void Dot4(const float* q, const float* k0, const float* k1,
                                                const float* k2, const float* k3, int32_t d,
                                                float* out) {
  const int32_t d8 = d & ~7;
  V8 a0 = Splat8(0.0f), a1 = Splat8(0.0f), a2 = Splat8(0.0f), a3 = Splat8(0.0f);
  for (int32_t k = 0; k < d8; k += 8) {
    const V8 vq = Load8(q + k);
    a0 = A::Fma(vq, Load8(k0 + k), a0);
    a1 = A::Fma(vq, Load8(k1 + k), a1);
    a2 = A::Fma(vq, Load8(k2 + k), a2);
    a3 = A::Fma(vq, Load8(k3 + k), a3);
  }
  float s0 = Combine8(a0), s1 = Combine8(a1), s2 = Combine8(a2), s3 = Combine8(a3);
  for (int32_t k = d8; k < d; ++k) {
    s0 = A::Fma1(q[k], k0[k], s0);
    s1 = A::Fma1(q[k], k1[k], s1);
    s2 = A::Fma1(q[k], k2[k], s2);
    s3 = A::Fma1(q[k], k3[k], s3);
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// One query head's step over keys [j0, j0 + n) (the header's per-chunk order); keys[j] and
// values[j] point at key j0 + j's head_dim floats.
template <typename A>
inline __attribute__((always_inline)) void ChunkStep(const float* qh, const float* const* keys,
                                                     const float* const* values, int32_t n,
                                                     int32_t d, float scale, float* scores,
                                                     float* acc, float* max, float* sum) {
  float chunk_max = -std::numeric_limits<float>::infinity();
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) Dot8<A>(qh, keys + j, d, scores + j);
  for (; j + 4 <= n; j += 4) {
    Dot4<A>(qh, keys[j], keys[j + 1], keys[j + 2], keys[j + 3], d, scores + j);
  }
  for (; j < n; ++j) scores[j] = FusedDot<A>(qh, keys[j], d);
  for (j = 0; j < n; ++j) {
    scores[j] *= scale;
    chunk_max = std::max(chunk_max, scores[j]);
  }
  const float m_new = std::max(*max, chunk_max);
  const float alpha = std::exp(*max - m_new);
  float l = *sum * alpha;
  for (int32_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - m_new);  // now each key's weight e
    l += scores[j];
  }
  AccumulateValues<A>(acc, alpha, scores, values, n, d);
  *sum = l;
  *max = m_new;
}

// One query (decode) over an f32 cache read in place (a copy would be read once), KV heads
// [kv_head, kv_head + kv_heads) chunk by chunk: each chunk's rows of all those heads lie side by
// side in the cache (NHD), so walking the heads inside the chunk reads the cache nearly in order,
// where one head at a time read one row in every num_kv_heads and waited on its prefetches. Each
// head's steps, and so its result, are those of TileImpl.
template <typename A>
inline __attribute__((always_inline)) void DecodeInPlace(const KvLayerView& view,
                                                         const AttentionSequence& s, const Task& t,
                                                         const float* q, int32_t num_heads,
                                                         float scale, float* out, Scratch& sc) {
  const int32_t d = view.head_dim;
  const int32_t group = num_heads / view.num_kv_heads;
  const int32_t last = s.first_pos + t.query;
  const size_t states = static_cast<size_t>(t.kv_heads) * group;
  sc.scores.resize(kAttentionChunk);
  sc.acc.assign(states * d, 0.0f);
  sc.max.assign(states, -std::numeric_limits<float>::infinity());
  sc.sum.assign(states, 0.0f);
  const float* qrow = q + (s.first_row + t.query) * static_cast<int64_t>(num_heads) * d;
  for (int32_t j0 = 0; j0 <= last; j0 += kAttentionChunk) {
    const int32_t n = std::min(kAttentionChunk, last + 1 - j0);
    for (int32_t hi = 0; hi < t.kv_heads; ++hi) {
      const int32_t h = t.kv_head + hi;
      const float* krows[kAttentionChunk];
      const float* vrows[kAttentionChunk];
      for (int32_t j = 0; j < n; ++j) {
        krows[j] = HeadInPlace(view, view.k, s.kernel_table, j0 + j, h);
        vrows[j] = HeadInPlace(view, view.v, s.kernel_table, j0 + j, h);
      }
      for (int32_t g = 0; g < group; ++g) {
        const size_t st = static_cast<size_t>(hi) * group + g;
        ChunkStep<A>(qrow + static_cast<int64_t>(h * group + g) * d, krows, vrows, n, d, scale,
                     sc.scores.data(), sc.acc.data() + st * d, &sc.max[st], &sc.sum[st]);
      }
    }
  }
  float* orow = out + (s.first_row + t.query) * static_cast<int64_t>(num_heads) * d;
  for (size_t st = 0; st < states; ++st) {
    float* o = orow + (static_cast<int64_t>(t.kv_head) * group + static_cast<int64_t>(st)) * d;
    for (int32_t i = 0; i < d; ++i) o[i] = sc.acc[st * d + i] / sc.sum[st];
  }
}

// A tile of queries at positions p0 .. p0 + nq - 1 of one sequence, one KV head: each key chunk
// is loaded once for the tile; each query attends over its own keys 0..p in the same chunks,
// so its result is the one it would get alone.
template <typename A>
inline __attribute__((always_inline)) void TileImpl(const KvLayerView& view,
                                                    const AttentionSequence& s, const Task& t,
                                                    const float* q, int32_t num_heads, float scale,
                                                    float* out, Scratch& sc) {
  const int32_t d = view.head_dim;
  const int32_t group = num_heads / view.num_kv_heads;
  const int32_t row_width = num_heads * d;
  const int32_t p0 = s.first_pos + t.query;
  const int32_t last = p0 + t.num_queries - 1;
  const size_t states = static_cast<size_t>(t.num_queries) * group;
  sc.keys.resize(static_cast<size_t>(kAttentionChunk) * d);
  sc.values.resize(sc.keys.size());
  sc.scores.resize(kAttentionChunk);
  sc.acc.assign(states * d, 0.0f);
  sc.max.assign(states, -std::numeric_limits<float>::infinity());
  sc.sum.assign(states, 0.0f);
  // Each chunk is copied once (converted to f32) and read from cache by every query.
  for (int32_t j0 = 0; j0 <= last; j0 += kAttentionChunk) {
    const int32_t loaded = std::min(kAttentionChunk, last + 1 - j0);
    const float* krows[kAttentionChunk];
    const float* vrows[kAttentionChunk];
    for (int32_t j = 0; j < loaded; ++j) {
      krows[j] = sc.keys.data() + j * d;
      vrows[j] = sc.values.data() + j * d;
      LoadHead(view, view.k, s.kernel_table, j0 + j, t.kv_head, sc.keys.data() + j * d);
      LoadHead(view, view.v, s.kernel_table, j0 + j, t.kv_head, sc.values.data() + j * d);
    }
    for (int32_t qi = std::max(0, j0 - p0); qi < t.num_queries; ++qi) {
      const int32_t n = std::min(kAttentionChunk, p0 + qi + 1 - j0);
      const float* qrow = q + (s.first_row + t.query + qi) * row_width;
      for (int32_t g = 0; g < group; ++g) {
        const size_t st = static_cast<size_t>(qi) * group + g;
        ChunkStep<A>(qrow + static_cast<int64_t>(t.kv_head * group + g) * d, krows, vrows, n, d,
                     scale, sc.scores.data(), sc.acc.data() + st * d, &sc.max[st], &sc.sum[st]);
      }
    }
  }
  for (int32_t qi = 0; qi < t.num_queries; ++qi) {
    float* orow = out + (s.first_row + t.query + qi) * row_width;
    for (int32_t g = 0; g < group; ++g) {
      const size_t st = static_cast<size_t>(qi) * group + g;
      float* o = orow + static_cast<int64_t>(t.kv_head * group + g) * d;
      const float* acc = sc.acc.data() + st * d;
      for (int32_t i = 0; i < d; ++i) o[i] = acc[i] / sc.sum[st];
    }
  }
}

// The same code for the baseline ISA and for AVX2 with FMA (wider vectors, identical results:
// every lane is the same IEEE operation, and a fused multiply-add rounds once on either).
__attribute__((flatten)) void TileGeneric(const KvLayerView& view, const AttentionSequence& s,
                                          const Task& t, const float* q, int32_t num_heads,
                                          float scale, float* out, Scratch& sc) {
  if (t.num_queries == 1 && view.dtype == kv::DType::kF32) {
    DecodeInPlace<SoftFma>(view, s, t, q, num_heads, scale, out, sc);
  } else {
    TileImpl<SoftFma>(view, s, t, q, num_heads, scale, out, sc);
  }
}
#if defined(__x86_64__)
#if KVF_HW_FMA
using Avx2Fma = HwFma;
#else
using Avx2Fma = SoftFma;
#endif
__attribute__((target("avx2,fma"), flatten)) void TileAvx2(const KvLayerView& view,
                                                           const AttentionSequence& s,
                                                           const Task& t, const float* q,
                                                           int32_t num_heads, float scale,
                                                           float* out, Scratch& sc) {
  if (t.num_queries == 1 && view.dtype == kv::DType::kF32) {
    DecodeInPlace<Avx2Fma>(view, s, t, q, num_heads, scale, out, sc);
  } else {
    TileImpl<Avx2Fma>(view, s, t, q, num_heads, scale, out, sc);
  }
}
#endif

std::atomic<bool> g_force_portable{false};

}  // namespace

void ForcePortableAttentionForTest(bool portable) { g_force_portable.store(portable); }

void Attention(const KvLayerView& view, std::span<const AttentionSequence> seqs, const float* q,
               int32_t num_heads, float scale, float* out, ThreadPool* pool) {
  std::vector<Task> tasks;
  int64_t work = 0;  // key positions visited, summed over queries
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    const AttentionSequence& s = seqs[si];
    // One query over an f32 cache (decode): the KV heads in two tasks that each walk their
    // heads chunk by chunk (DecodeInPlace; one task when there is one head); otherwise a task
    // per (tile, KV head).
    if (s.num_queries == 1 && view.dtype == kv::DType::kF32 && view.num_kv_heads > 1) {
      work += int64_t{s.first_pos + 1} * view.num_kv_heads;
      const int32_t half = view.num_kv_heads / 2;
      tasks.push_back({si, 0, 1, 0, half});
      tasks.push_back({si, 0, 1, half, view.num_kv_heads - half});
      continue;
    }
    for (int32_t i = 0; i < s.num_queries; i += kQueryTile) {
      const int32_t nq = std::min(kQueryTile, s.num_queries - i);
      for (int32_t k = 0; k < nq; ++k) work += int64_t{s.first_pos + i + k + 1} * view.num_kv_heads;
      for (int32_t h = 0; h < view.num_kv_heads; ++h) tasks.push_back({si, i, nq, h});
    }
  }
#if defined(__x86_64__)
  auto tile =
      CpuHasAvx2() && !g_force_portable.load(std::memory_order_relaxed) ? &TileAvx2 : &TileGeneric;
#else
  auto tile = &TileGeneric;
#endif
  auto body = [&](int64_t begin, int64_t end) {
    Scratch sc;
    for (int64_t t = begin; t < end; ++t) {
      const Task& task = tasks[t];
      tile(view, seqs[task.seq], task, q, num_heads, scale, out, sc);
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
