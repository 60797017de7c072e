// ModelRunner (internal): the forward pass of the decoder over a batch of sequence chunks,
// reading and writing the paged KV cache through kernel block tables.
//
// A batch is a list of chunks; chunk i computes tokens at positions [first_pos, first_pos + n)
// of its sequence, whose earlier positions are already in the cache. All rows of all chunks go
// through each matmul together (continuous batching); every kernel keeps the determinism
// contract (docs/engine.md), so a row's values do not depend on the other rows.
//
// Per layer: h = RmsNorm(x); qkv = h Wqkv^T (+ q/k/v biases: Qwen2); per-head RmsNorm of q and
// k (Qwen3); RoPE(q, k); store k, v in the cache; attention
// (reads the cache, own token included); x += o Wo^T; h = RmsNorm(x);
// x += SwiGlu(h Wgu^T) Wdown^T. Logits: RmsNorm(x) lm_head^T for the last row of the chunks
// that ask for them.
//
// Thread-safety: not thread-safe (owns scratch buffers); uses `pool` inside Forward().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels/rope.h"
#include "engine/weights.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::engine {

class ThreadPool;

struct ForwardChunk {
  std::span<const int32_t> tokens;  // the chunk's token ids (n of them)
  int32_t first_pos = 0;
  std::span<const kv::KernelBlockId> kernel_table;  // covers positions < first_pos + n
  bool want_logits = false;                         // logits of the chunk's last token
};

class ModelRunner {
 public:
  // `weights`, `cache` and `pool` must outlive the runner. The cache must have the model's
  // layers, KV heads and head dim (checked by the engine).
  ModelRunner(const ModelWeights* weights, kv::KvCache* cache, int32_t max_position,
              ThreadPool* pool);

  // Runs the chunks; `logits` gets one row of vocab_size floats per chunk with want_logits, in
  // chunk order.
  void Forward(std::span<const ForwardChunk> chunks, std::vector<float>* logits);

  const ModelConfig& config() const { return weights_->config; }

 private:
  // Biases and q/k norms of one row of the fused q|k|v projection, in place.
  void PrepareQk(const LayerWeights& lw, float* row) const;

  const ModelWeights* weights_;
  kv::KvCache* cache_;
  ThreadPool* pool_;
  kernels::RopeTable rope_;
  // Scratch, reused across calls.
  std::vector<float> x_, h_, qkv_, q_, attn_, proj_, gu_, act_, last_;
  std::vector<int32_t> positions_;
};

}  // namespace kvferry::engine
