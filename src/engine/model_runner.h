// ModelRunner (internal): one tensor-parallel rank's forward pass of the decoder over a batch of
// sequence chunks, reading and writing the rank's paged KV cache through kernel block tables.
//
// A batch is a list of chunks; chunk i computes tokens at positions [first_pos, first_pos + n)
// of its sequence, whose earlier positions are already in the cache. All rows of all chunks go
// through each matmul together (continuous batching); every kernel keeps the determinism
// contract (docs/engine.md), so a row's values do not depend on the other rows.
//
// Per layer, for the rank's shard (tensor_parallel.h): h = RmsNorm(x); qkv = h Wqkv^T of its
// query and KV heads (+ q/k/v biases: Qwen2); per-head RmsNorm of q and k (Qwen3); RoPE(q, k);
// store k, v in its cache; attention over its heads (reads the cache, own token included);
// x += AllReduce(o Wo^T over its heads); h = RmsNorm(x); x += AllReduce(SwiGlu(h Wgu^T)
// Wdown^T over its ffn columns). MLA models replace the attention part by
// MlaAttentionBlock (docs/engine.md, "Multi-head latent attention"); an MoE layer's MLP is its
// shared experts (if any) and then MoeBlock's routed experts (moe_layer.cc). The all-reduce
// (TpCommunicator) leaves every rank's x identical. Logits: RmsNorm(x) lm_head^T of its vocab rows,
// for the last row of the chunks that ask for them.
//
// Thread-safety: not thread-safe (owns scratch buffers); one thread per rank calls Forward, all
// ranks at once (they meet in the all-reduce); uses `pool` inside Forward().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kernels/attention.h"
#include "engine/kernels/rope.h"
#include "engine/tensor_parallel.h"
#include "engine/tp_communicator.h"
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

// Rows of logits a batch produces: its chunks with want_logits and at least one token.
int64_t NumLogitRows(std::span<const ForwardChunk> chunks);

// The model's RoPE table for positions < max_position (one per engine, shared by its ranks).
std::shared_ptr<const kernels::RopeTable> MakeRopeTable(const ModelConfig& config,
                                                        int32_t max_position);

class ModelRunner {
 public:
  // Rank `shard->shard.rank` of a tensor-parallel group meeting in `comm`. `shard`, `comm`,
  // `cache` and `pool` must outlive the runner. The cache holds the rank's KV heads (checked by
  // the engine). `rope` (shared by the ranks) covers the positions the engine allows.
  ModelRunner(const ModelShard* shard, TpCommunicator* comm,
              std::shared_ptr<const kernels::RopeTable> rope, kv::KvCache* cache, ThreadPool* pool);
  // A whole model on one rank (TP 1), for tests that drive the runner directly.
  ModelRunner(const ModelWeights* weights, kv::KvCache* cache, int32_t max_position,
              ThreadPool* pool);

  // Runs the chunks; this rank writes its vocab columns of `logits` ([NumLogitRows][vocab],
  // sized by the caller), one row per chunk with want_logits, in chunk order.
  void Forward(std::span<const ForwardChunk> chunks, float* logits);
  // TP 1 only: sizes `logits` and runs the chunks.
  void Forward(std::span<const ForwardChunk> chunks, std::vector<float>* logits);

  const ModelConfig& config() const { return shard_->full->config; }

 private:
  // x_ = the chunks' token embeddings, positions_ their positions; sizes the scratch rows.
  void Embed(std::span<const ForwardChunk> chunks, int64_t rows);
  // Layer l's attention for a GQA/MHA model: from h_ (normed x) through the fused q|k|v
  // projection, RoPE and the cache (the chunk's k, v stored first) to attn_.
  void AttentionBlock(int32_t l, std::span<const kernels::AttentionSequence> seqs, int64_t rows);
  // Final norm and this rank's lm_head columns for the last row of each chunk that wants
  // logits, into `logits` (one row per such chunk).
  void WriteLogits(std::span<const ForwardChunk> chunks,
                   std::span<const kernels::AttentionSequence> seqs, float* logits);
  // Biases and q/k norms of one row of the fused q|k|v projection, in place.
  void PrepareQk(const LayerShard& lw, float* row) const;
  // o projection and MLP (or MoE) of layer l, from attn_ (x += both, all-reduced).
  void FinishLayer(int32_t l, const LayerShard& lw, int64_t rows);
  // Layer l's attention for an MLA model (mla_layer.cc): from h_ (normed x) to attn_
  // ([rows][H * v_head_dim]); stores the chunk's latent rows in the cache first.
  void MlaAttentionBlock(int32_t l, std::span<const kernels::AttentionSequence> seqs, int64_t rows);
  // An MoE layer's routed experts, from h_ (the normed x): x += the all-reduced weighted sum of
  // the chosen experts' outputs (the rank's experts only; tensor_parallel.h).
  void MoeBlock(const LayerShard& lw, int64_t rows);
  // MoeBlock's parts: each row's experts and weights (route_e_, route_w_) and the rows of each
  // expert (expert_first_, expert_rows_); then expert e over its rows, leaf += weight * output.
  void RouteRows(const LayerShard& lw, int64_t rows);
  void RunExpert(const LayerShard& lw, int32_t e, float* leaf);
  // x += the all-reduced row-parallel product of `in` ([rows][K]) and the shard's `w`.
  void RowParallelAdd(const float* in, int64_t rows, std::span<const int64_t> bounds,
                      const WeightMatrix& w);

  // Set by the TP-1 constructor: the shard and communicator it made for itself.
  std::unique_ptr<ModelShard> own_shard_;
  std::unique_ptr<TpCommunicator> own_comm_;

  const ModelShard* shard_;
  TpCommunicator* comm_;
  kv::KvCache* cache_;
  ThreadPool* pool_;
  std::shared_ptr<const kernels::RopeTable> rope_;
  // Scratch, reused across calls.
  std::vector<float> x_, h_, qkv_, q_, attn_, gu_, act_, last_, leaves_;
  std::vector<float> qa_, latent_, qcat_, olat_;                       // MLA
  std::vector<float> router_, route_w_, xin_, expert_y_, moe_leaves_;  // MoE
  std::vector<int32_t> route_e_, expert_rows_, expert_first_;
  std::vector<int32_t> positions_;
};

}  // namespace kvferry::engine
