// Tensor parallelism (internal): how a model splits over the tp_size ranks of one engine, and
// the fixed reduction tree that makes the split invisible in the output (docs/engine.md,
// "Tensor parallelism").
//
// Column-parallel layers (q/k/v, gate/up, lm_head) give each rank some output features; every
// output value is still one canonical Dot over the whole input, so nothing changes. Row-parallel
// layers (attention output o_proj, MLP down_proj) give each rank some INPUT features, so their
// sum is split; kvferry fixes its order by the model alone:
//
//   G = RowParallelGroups(model) contiguous groups of K (o_proj: H/G whole query heads each;
//   down_proj: the ffn columns [g*F/G, (g+1)*F/G)); group g's partial is the canonical Dot over
//   its columns; y = the balanced pairwise tree of the G partials (G = 4: ((p0+p1)+(p2+p3))).
//
// A TP size N must divide G: rank r computes groups [r*G/N, (r+1)*G/N), combines them with the
// same tree (an aligned subtree), and the all-reduce (TpCommunicator) combines the N rank
// results with the top of the tree. TP 1 computes all G groups itself. Same tree, same bits.
//
// Mixture of experts (expert parallelism): the routed experts of an MoE layer split into the same
// G leaves (leaf g: experts [g*E/G, (g+1)*E/G)); a leaf's partial is the sum, in expert order,
// of its experts' weighted outputs for a token (0 when it chose none there), and the leaves
// combine by the same tree — so rank r runs the experts of its leaves, whole, and the output
// is the same at every TP size. Shared experts split like the dense MLP's columns.
//
// Query heads split evenly (H/N per rank); KV heads follow kv::HeadSharding (split, or
// replicated when fewer than N; MLA's one latent "head" is replicated on every rank, each rank
// computing it from the whole kv_a_proj_with_mqa); logits are split by vocab rows (ranks write
// disjoint columns of one logits buffer); embeddings and norms are replicated.
//
// Thread-safety: values; a ModelShard points into a ModelWeights that must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/weights.h"
#include "kvferry/common/status.h"
#include "kvferry/kv/head_sharding.h"

namespace kvferry::engine {

// The leaves of the row-parallel tree: 4 when the query heads split in 4, else 2, else 1.
int32_t RowParallelGroups(const ModelConfig& config);

// What one rank computes.
struct RankShard {
  int32_t rank = 0;
  int32_t tp_size = 1;
  int32_t q_head_first = 0, num_q_heads = 0;    // global query heads
  int32_t kv_head_first = 0, num_kv_heads = 0;  // global KV heads in this rank's cache
  int64_t ffn_first = 0, ffn_count = 0;         // MLP intermediate columns
  int64_t vocab_first = 0, vocab_count = 0;     // lm_head rows: this rank's logits columns
  // The rank's leaves of the row-parallel tree, as boundaries within its own input columns
  // (first 0, last = its width): o_proj over its q_heads * head_dim, down_proj over ffn_count.
  std::vector<int64_t> o_bounds, down_bounds;
  // MoE layers: the shared experts' columns and leaves (as ffn_* for the dense MLP), and the
  // routed experts' leaves as global expert ids (first = its first expert, last = one past its
  // last).
  int64_t shared_first = 0, shared_count = 0;
  std::vector<int64_t> shared_bounds;
  std::vector<int32_t> expert_bounds;
};

// One shard per rank. InvalidArgument naming the model's head counts when tp_size does not
// divide RowParallelGroups or the KV heads cannot be sharded (kv::HeadSharding).
StatusOr<std::vector<RankShard>> PlanTensorParallel(const ModelConfig& config, int32_t tp_size);

// InvalidArgument naming the layer and tensor when a quantized row-parallel weight (o_proj,
// down_proj, the shared experts' down_proj) has leaf boundaries that cut its blocks: the leaves are
// the model's, whatever the TP size, so such a model cannot compute in its blocks at any TP size.
Status CheckQuantizedLeaves(const ModelWeights& weights);

// One layer's weights as a rank sees them: views into the full weights (column-parallel parts
// as row slices, row-parallel parts as strided column slices), never copies. gate, up and down
// are the dense MLP's, or an MoE layer's shared experts'; the router and the routed experts are
// read whole from `full`.
struct LayerShard {
  const LayerWeights* full = nullptr;  // norms (replicated)
  WeightMatrix q, k, v, o, gate, up, down;
  std::span<const float> q_bias, k_bias, v_bias;  // empty without attention_bias
  std::array<WeightMatrix, 3> qkv() const { return {q, k, v}; }
  std::array<WeightMatrix, 2> gate_up() const { return {gate, up}; }
  WeightMatrix q_b;  // MLA with q_lora_rank: the rank's heads' rows of q_b_proj (q: of q_proj)
  // MLA (weight absorption, docs/engine.md), per query head h of the rank (local index):
  // k_absorb[h] is kv_b's key rows of h transposed ([kv_lora][qk_nope], f32, owned by the
  // ModelShard) so that q_nope k_absorb^T is the query in latent space; v_up[h] is kv_b's value
  // rows of h (a view), which take the attention's latent output to the head's values.
  std::vector<WeightMatrix> k_absorb, v_up;
};

struct ModelShard {
  const ModelWeights* full = nullptr;
  RankShard shard;
  std::vector<LayerShard> layers;
  WeightMatrix lm_head;  // this rank's vocab rows
  // Owner of the matrices ShardWeights derives (MLA's k_absorb); shared by copies.
  std::vector<std::shared_ptr<const std::vector<float>>> storage;
};

ModelShard ShardWeights(const ModelWeights& weights, const RankShard& shard);

}  // namespace kvferry::engine
