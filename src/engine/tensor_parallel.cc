#include "engine/tensor_parallel.h"

#include <string>

namespace kvferry::engine {

int32_t RowParallelGroups(const ModelConfig& c) {
  if (c.num_heads % 4 == 0) return 4;
  return c.num_heads % 2 == 0 ? 2 : 1;
}

namespace {

// Boundary of leaf g of G over `width` columns (o_proj: G divides the heads, so whole heads).
int64_t LeafBound(int64_t width, int32_t g, int32_t groups) { return width * g / groups; }

std::vector<int64_t> LocalBounds(int64_t width, int32_t first_leaf, int32_t num_leaves,
                                 int32_t groups) {
  std::vector<int64_t> out;
  const int64_t base = LeafBound(width, first_leaf, groups);
  for (int32_t g = first_leaf; g <= first_leaf + num_leaves; ++g) {
    out.push_back(LeafBound(width, g, groups) - base);
  }
  return out;
}

// One MLA layer as rank `s` sees it: its query heads' rows of q_proj (or q_b_proj), their
// absorbed key matrices and value views (LayerShard::k_absorb, v_up) and their columns of
// o_proj. q_a_proj and kv_a_proj_with_mqa stay whole: every rank computes (and caches) the latent.
void ShardMla(const ModelConfig& c, const LayerWeights& lw, const RankShard& s, LayerShard& l,
              ModelShard& out) {
  const MlaShape& m = c.mla;
  const int64_t q0 = int64_t{s.q_head_first} * c.head_dim;
  const int64_t qn = int64_t{s.num_q_heads} * c.head_dim;
  if (m.q_lora_rank > 0) {
    l.q_b = RowSlice(lw.q_b, q0, qn);
  } else {
    l.q = RowSlice(lw.q, q0, qn);
  }
  l.o = ColumnSlice(lw.o, int64_t{s.q_head_first} * m.v_head_dim,
                    int64_t{s.num_q_heads} * m.v_head_dim);
  const int64_t per_head = m.qk_nope_head_dim + m.v_head_dim;
  const std::vector<float> kv_b = ToF32(lw.kv_b);  // [H * per_head][kv_lora]
  for (int32_t h = s.q_head_first; h < s.q_head_first + s.num_q_heads; ++h) {
    auto t = std::make_shared<std::vector<float>>(
        static_cast<size_t>(int64_t{m.kv_lora_rank} * m.qk_nope_head_dim));
    for (int64_t i = 0; i < m.qk_nope_head_dim; ++i) {
      for (int64_t j = 0; j < m.kv_lora_rank; ++j) {
        (*t)[j * m.qk_nope_head_dim + i] = kv_b[(h * per_head + i) * m.kv_lora_rank + j];
      }
    }
    l.k_absorb.push_back(F32Matrix(t->data(), m.kv_lora_rank, m.qk_nope_head_dim));
    l.v_up.push_back(RowSlice(lw.kv_b, h * per_head + m.qk_nope_head_dim, m.v_head_dim));
    out.storage.push_back(std::move(t));
  }
}

}  // namespace

StatusOr<std::vector<RankShard>> PlanTensorParallel(const ModelConfig& c, int32_t tp_size) {
  const int32_t groups = RowParallelGroups(c);
  if (tp_size < 1 || groups % tp_size != 0) {
    return InvalidArgumentError(
        "tensor_parallel_size " + std::to_string(tp_size) + ": model " + c.name + " has " +
        std::to_string(c.num_heads) + " attention heads, so its row-parallel layers reduce " +
        "over " + std::to_string(groups) + " fixed groups and the TP size must divide " +
        std::to_string(groups) + " (docs/engine.md, \"Tensor parallelism\")");
  }
  StatusOr<kv::HeadSharding> kv_sharding = kv::HeadSharding::Create(c.num_kv_heads, tp_size);
  if (!kv_sharding.ok()) {
    return InvalidArgumentError("tensor_parallel_size " + std::to_string(tp_size) + ": model " +
                                c.name + ": " + std::string(kv_sharding.status().message()));
  }
  const int32_t leaves = groups / tp_size;
  const int64_t o_width = int64_t{c.num_heads} * c.attn_out_head_dim();
  std::vector<RankShard> out;
  for (int32_t r = 0; r < tp_size; ++r) {
    RankShard s;
    s.rank = r;
    s.tp_size = tp_size;
    s.num_q_heads = c.num_heads / tp_size;
    s.q_head_first = r * s.num_q_heads;
    s.kv_head_first = kv_sharding->FirstHead(r);
    s.num_kv_heads = kv_sharding->HeadsPerRank();
    // Groups of whole heads (G divides H), so the rank's heads are exactly its leaves.
    s.o_bounds = LocalBounds(o_width, r * leaves, leaves, groups);
    s.ffn_first = LeafBound(c.ffn_dim, r * leaves, groups);
    s.ffn_count = LeafBound(c.ffn_dim, (r + 1) * leaves, groups) - s.ffn_first;
    s.down_bounds = LocalBounds(c.ffn_dim, r * leaves, leaves, groups);
    const int64_t shared = int64_t{c.moe.shared_experts} * c.moe.expert_ffn_dim;
    s.shared_first = LeafBound(shared, r * leaves, groups);
    s.shared_count = LeafBound(shared, (r + 1) * leaves, groups) - s.shared_first;
    s.shared_bounds = LocalBounds(shared, r * leaves, leaves, groups);
    for (int32_t g = r * leaves; g <= (r + 1) * leaves; ++g) {
      s.expert_bounds.push_back(static_cast<int32_t>(LeafBound(c.moe.num_experts, g, groups)));
    }
    s.vocab_first = int64_t{c.vocab_size} * r / tp_size;
    s.vocab_count = int64_t{c.vocab_size} * (r + 1) / tp_size - s.vocab_first;
    out.push_back(std::move(s));
  }
  return out;
}

Status CheckQuantizedLeaves(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int32_t groups = RowParallelGroups(c);
  const int64_t o_width = int64_t{c.num_heads} * c.attn_out_head_dim();
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::pair<const WeightMatrix*, const char*> parts[] = {
        {&lw.o, "attention output projection (o_proj / attn_output)"},
        {&lw.down, "MLP down projection (down_proj / ffn_down)"}};
    for (const auto& [m, what] : parts) {
      if (!m->quantized()) continue;
      const int64_t block = formats::DTypeBlockElements(m->dtype);
      const int64_t width = m == &lw.o ? o_width : c.dense_ffn_dim(static_cast<int32_t>(l));
      for (int32_t g = 1; g < groups; ++g) {
        if (LeafBound(width, g, groups) % block == 0) continue;
        return InvalidArgumentError(
            "model " + c.name + ": layer " + std::to_string(l) + "'s " + what + " is " +
            std::string(formats::DTypeName(m->dtype)) + ", and its " + std::to_string(width) +
            " input columns reduce in " + std::to_string(groups) + " fixed groups of " +
            std::to_string(width / groups) + " (docs/engine.md, \"Tensor parallelism\"), which " +
            "cut its blocks of " + std::to_string(block) + "; this shape runs in F32/F16/BF16");
      }
    }
  }
  return Status::Ok();
}

ModelShard ShardWeights(const ModelWeights& w, const RankShard& s) {
  const int64_t d = w.config.head_dim;
  ModelShard out;
  out.full = &w;
  out.shard = s;
  const int64_t q0 = s.q_head_first * d, qn = s.num_q_heads * d;
  const int64_t k0 = s.kv_head_first * d, kn = s.num_kv_heads * d;
  for (const LayerWeights& lw : w.layers) {
    LayerShard l;
    l.full = &lw;
    if (w.config.is_mla()) {
      ShardMla(w.config, lw, s, l, out);
    } else {
      l.q = RowSlice(lw.q, q0, qn);
      l.k = RowSlice(lw.k, k0, kn);
      l.v = RowSlice(lw.v, k0, kn);
      l.o = ColumnSlice(lw.o, q0, qn);
    }
    const bool moe = w.config.is_moe_layer(static_cast<int32_t>(out.layers.size()));
    const int64_t f0 = moe ? s.shared_first : s.ffn_first;
    const int64_t fn = moe ? s.shared_count : s.ffn_count;
    if (fn > 0) {
      l.gate = RowSlice(lw.gate, f0, fn);
      l.up = RowSlice(lw.up, f0, fn);
      l.down = ColumnSlice(lw.down, f0, fn);
    }
    if (!lw.q_bias.empty()) {
      l.q_bias = std::span<const float>(lw.q_bias).subspan(q0, qn);
      l.k_bias = std::span<const float>(lw.k_bias).subspan(k0, kn);
      l.v_bias = std::span<const float>(lw.v_bias).subspan(k0, kn);
    }
    out.layers.push_back(l);
  }
  out.lm_head = RowSlice(w.lm_head, s.vocab_first, s.vocab_count);
  return out;
}

}  // namespace kvferry::engine
