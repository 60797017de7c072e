// Causal grouped-query attention over the paged KV cache (internal).
//
// For each query row (a token at sequence position p) and each query head h (KV head
// h / (num_heads / num_kv_heads)), attends over positions 0..p of its sequence, reading K and V
// through the sequence's KERNEL block table (kv_store.h), in f32 whatever the storage dtype.
//
// Determinism: the reduction order depends only on p. Keys are visited in fixed chunks of
// kAttentionChunk positions [16c, 16c + 16) ∩ [0, p] — independent of the kernel block size,
// the layout and the batch. Per chunk: scores s_j = FusedDot(q, k_j, head_dim) * scale (simd.h),
// chunk max, running max M' = max(M, chunk max), rescale (l, acc) by exp(M - M'), then for each
// j in increasing order: e = exp(s_j - M'), l += e, acc = fma(e, v_j, acc) (elementwise over
// dim, one rounding).
// Output = acc / l. Consecutive query rows of a sequence (tiles of up to 16) share each key
// chunk's load and dtype conversion, but each row keeps its own state and its own chunks, so a
// row's result does not depend on its tile. A decode query over an f32 cache instead walks
// its KV heads inside each chunk (two tasks of half the heads each: the cache's rows of one
// position lie side by side), each head with the same steps. Threads split tasks, never a
// reduction. The elementwise steps use 8-float vectors, compiled for AVX2 and FMA where the CPU
// has them (simd.h: the same results at any width).
//
// The K/V of the query tokens themselves must already be stored (StoreKv) before the call, so
// a token sees the same (dtype-rounded) keys whether its sequence was prefilled at once, in
// chunks, or token by token.
//
// Thread-safety: reads the cache, writes `out`; `pool` may be null.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kernels/kv_store.h"

namespace kvferry::engine {
class ThreadPool;
}

namespace kvferry::engine::kernels {

inline constexpr int32_t kAttentionChunk = 16;

// A run of query rows of one sequence: rows [first_row, first_row + num_queries) of q/out are
// positions [first_pos, first_pos + num_queries) of the sequence.
struct AttentionSequence {
  const kv::KernelBlockId* kernel_table = nullptr;
  int32_t first_pos = 0;
  int32_t num_queries = 0;
  int64_t first_row = 0;
};

// q, out: [rows][num_heads * head_dim].
void Attention(const KvLayerView& view, std::span<const AttentionSequence> seqs, const float* q,
               int32_t num_heads, float scale, float* out, ThreadPool* pool);

// Test hook (process-wide): true runs the baseline-ISA copy even where the CPU has AVX2, so a
// test can show both copies give the same bits on one machine.
void ForcePortableAttentionForTest(bool portable);

// Naive reference: full softmax per query (two passes, max then sum, in position order), for
// tests; agrees with Attention to rounding, not bit for bit.
void AttentionReference(const KvLayerView& view, std::span<const AttentionSequence> seqs,
                        const float* q, int32_t num_heads, float scale, float* out);

}  // namespace kvferry::engine::kernels
