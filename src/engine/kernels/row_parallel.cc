#include "engine/kernels/row_parallel.h"

#include <algorithm>

#include "engine/kernels/matmul.h"
#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {
namespace {

float TreeAt(const float* const* parts, size_t leaves, int64_t i) {
  if (leaves == 1) return parts[0][i];
  const size_t half = leaves / 2;
  return TreeAt(parts, half, i) + TreeAt(parts + half, half, i);
}

}  // namespace

void TreeSum(std::span<const float* const> parts, int64_t n, float* out) {
  switch (parts.size()) {
    case 1:
      if (out != parts[0]) std::copy(parts[0], parts[0] + n, out);
      return;
    case 2:
      for (int64_t i = 0; i < n; ++i) out[i] = parts[0][i] + parts[1][i];
      return;
    case 4:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = (parts[0][i] + parts[1][i]) + (parts[2][i] + parts[3][i]);
      }
      return;
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = TreeAt(parts.data(), parts.size(), i);
  }
}

void RowParallelMatMul(const float* x, int64_t M, std::span<const int64_t> bounds,
                       const WeightMatrix& w, float* y, std::vector<float>* scratch,
                       ThreadPool* pool) {
  const int64_t K = bounds.back();
  const int64_t N = w.rows;
  const size_t leaves = bounds.size() - 1;
  if (leaves == 1) {
    MatMulStrided(x, M, K, K, {&w, 1}, y, N, pool);
    return;
  }
  const int64_t leaf_size = M * N;
  if (static_cast<int64_t>(scratch->size()) < leaf_size * static_cast<int64_t>(leaves)) {
    scratch->resize(static_cast<size_t>(leaf_size * static_cast<int64_t>(leaves)));
  }
  // Threads split the output columns once; each computes every leaf of its columns, then their
  // tree (one hand-off per layer, not one per leaf).
  auto body = [&](int64_t n0, int64_t n1) {
    std::vector<const float*> parts(leaves);
    for (size_t i = 0; i < leaves; ++i) {
      const int64_t b = bounds[i], kb = bounds[i + 1] - bounds[i];
      const WeightMatrix slice = RowSlice(ColumnSlice(w, b, kb), n0, n1 - n0);
      float* out = scratch->data() + static_cast<int64_t>(i) * leaf_size;
      MatMulStrided(x + b, M, kb, K, {&slice, 1}, out + n0, N, nullptr);
      parts[i] = out;
    }
    std::vector<const float*> row(leaves);
    for (int64_t m = 0; m < M; ++m) {
      for (size_t i = 0; i < leaves; ++i) row[i] = parts[i] + m * N + n0;
      TreeSum(row, n1 - n0, y + m * N + n0);
    }
  };
  if (pool == nullptr || M * N * K < (int64_t{1} << 16)) {
    body(0, N);
  } else {
    pool->ParallelFor(N, 16, body);
  }
}

}  // namespace kvferry::engine::kernels
