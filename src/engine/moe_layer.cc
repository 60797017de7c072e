// ModelRunner::MoeBlock: the routed experts of one mixture-of-experts layer (docs/engine.md,
// "Mixture of experts"), on one tensor-parallel rank.
//
//   logits  = h router^T                        [rows][E]  (every rank, canonical MatMul)
//   chosen  = RouteToken(logits) per row         K experts, ascending ids, and their weights
//   y_e     = SwiGlu(h_e [gate_e | up_e]^T) down_e^T    for each expert e of the rank, over
//             the rows that chose it (gathered: each output value is a canonical Dot of its
//             own row, so who else chose e changes nothing)
//   leaf g  = sum over e in leaf g, ascending, of weight * y_e   (0 where a row chose none)
//   x      += TreeSum over the rank's leaves, all-reduced with the other ranks' (the model's
//             fixed tree: tensor_parallel.h)
// So a row's output depends on the row alone, at any batch size and TP size.
#include <algorithm>
#include <cstring>

#include "engine/kernels/matmul.h"
#include "engine/kernels/row_parallel.h"
#include "engine/kernels/swiglu.h"
#include "engine/model_runner.h"
#include "engine/moe_router.h"

namespace kvferry::engine {

void ModelRunner::RouteRows(const LayerShard& lw, int64_t rows) {
  const ModelConfig& c = config();
  const MoeShape& m = c.moe;
  const int32_t n_exp = m.num_experts, k = m.experts_per_token;
  router_.resize(rows * n_exp);
  route_e_.resize(rows * k);
  route_w_.resize(rows * k);
  kernels::MatMul(h_.data(), rows, c.hidden_dim, {&lw.full->router, 1}, router_.data(), pool_);
  for (int64_t r = 0; r < rows; ++r) {
    RouteToken(m, &router_[r * n_exp], lw.full->router_bias, &route_e_[r * k], &route_w_[r * k]);
  }
  // The (row, slot) pairs of each expert, grouped by expert (a counting sort; rows ascending).
  expert_first_.assign(n_exp + 1, 0);
  for (int32_t e : route_e_) ++expert_first_[e + 1];
  for (int32_t e = 0; e < n_exp; ++e) expert_first_[e + 1] += expert_first_[e];
  expert_rows_.resize(rows * k);
  std::vector<int32_t> next(expert_first_.begin(), expert_first_.end() - 1);
  for (int64_t i = 0; i < rows * k; ++i) {
    expert_rows_[next[route_e_[i]]++] = static_cast<int32_t>(i);
  }
}

void ModelRunner::RunExpert(const LayerShard& lw, int32_t e, float* leaf) {
  const int64_t d = config().hidden_dim, f = config().moe.expert_ffn_dim;
  const int32_t k = config().moe.experts_per_token;
  const int32_t first = expert_first_[e], n = expert_first_[e + 1] - first;
  if (n == 0) return;
  xin_.resize(n * d);
  for (int32_t j = 0; j < n; ++j) {
    const int64_t row = expert_rows_[first + j] / k;
    std::memcpy(&xin_[j * d], &h_[row * d], sizeof(float) * d);
  }
  gu_.resize(n * 2 * f);
  act_.resize(n * f);
  expert_y_.resize(n * d);
  const WeightMatrix gate_up[] = {lw.full->expert_gate[e], lw.full->expert_up[e]};
  kernels::MatMul(xin_.data(), n, d, gate_up, gu_.data(), pool_);
  kernels::SwiGlu(gu_.data(), n, f, act_.data());
  kernels::MatMul(act_.data(), n, f, {&lw.full->expert_down[e], 1}, expert_y_.data(), pool_);
  for (int32_t j = 0; j < n; ++j) {
    const int32_t slot = expert_rows_[first + j];
    const float w = route_w_[slot];
    float* out = &leaf[(slot / k) * d];
    const float* y = &expert_y_[j * d];
    for (int64_t t = 0; t < d; ++t) out[t] += w * y[t];
  }
}

void ModelRunner::MoeBlock(const LayerShard& lw, int64_t rows) {
  const RankShard& rs = shard_->shard;
  const int64_t n = rows * config().hidden_dim;
  RouteRows(lw, rows);
  const int32_t leaves = static_cast<int32_t>(rs.expert_bounds.size()) - 1;
  moe_leaves_.assign(leaves * n, 0.0f);
  std::vector<const float*> parts;
  for (int32_t g = 0; g < leaves; ++g) {
    float* leaf = &moe_leaves_[g * n];
    for (int32_t e = rs.expert_bounds[g]; e < rs.expert_bounds[g + 1]; ++e) RunExpert(lw, e, leaf);
    parts.push_back(leaf);
  }
  float* partial = comm_->PartialBuffer(rs.rank, n);
  kernels::TreeSum(parts, n, partial);
  comm_->AllReduceAdd(rs.rank, n, x_.data());
}

}  // namespace kvferry::engine
