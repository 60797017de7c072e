#include "engine/model/deepseek_rope.h"

#include <cstring>
#include <memory>
#include <vector>

namespace kvferry::engine {
namespace {

// A copy of `m` with rows [g * group_rows + offset, + dim) of every group g permuted between
// the interleaved and the rotate-half order; the other rows copied as they are.
WeightMatrix PermuteRows(const WeightMatrix& m, int64_t group_rows, int64_t offset, int64_t dim,
                         bool to_interleaved, ModelWeights* owner) {
  const int64_t row_bytes = m.bytes_of(m.cols);
  auto buffer = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(m.rows * row_bytes));
  auto copy = [&](int64_t dst, int64_t src) {
    std::memcpy(buffer->data() + dst * row_bytes, m.row(src), static_cast<size_t>(row_bytes));
  };
  const int64_t half = dim / 2;
  for (int64_t g = 0; g * group_rows < m.rows; ++g) {
    const int64_t base = g * group_rows;
    for (int64_t r = 0; r < offset; ++r) copy(base + r, base + r);
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t rotate_half = base + offset + part * half + j;
        const int64_t interleaved = base + offset + 2 * j + part;
        if (to_interleaved) {
          copy(interleaved, rotate_half);
        } else {
          copy(rotate_half, interleaved);
        }
      }
    }
    for (int64_t r = offset + dim; r < group_rows; ++r) copy(base + r, base + r);
  }
  WeightMatrix out = m;
  out.data = buffer->data();
  out.stride = 0;
  owner->storage.push_back(std::move(buffer));
  return out;
}

}  // namespace

void PermuteMlaRopeRows(ModelWeights* w, bool to_interleaved) {
  const ModelConfig& c = w->config;
  if (!c.is_mla()) return;
  const MlaShape& m = c.mla;
  for (LayerWeights& lw : w->layers) {
    WeightMatrix& q = m.q_lora_rank > 0 ? lw.q_b : lw.q;
    q = PermuteRows(q, c.head_dim, m.qk_nope_head_dim, m.qk_rope_head_dim, to_interleaved, w);
    lw.kv_a = PermuteRows(lw.kv_a, c.kv_cache_head_dim(), m.kv_lora_rank, m.qk_rope_head_dim,
                          to_interleaved, w);
  }
}

}  // namespace kvferry::engine
