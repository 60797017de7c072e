// WeightMatrix (internal): a [rows][cols] row-major matrix of model weights in the dtype it is
// stored in (F32, F16, BF16, or a GGUF block-quantized type: Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K,
// Q5_K, Q6_K), not owned — it points into a checkpoint's memory mapping or into a buffer the
// model owns (engine/weights.h says who keeps the bytes alive). Rows may be further apart than
// `cols` (`stride`): a tensor-parallel rank's column slice of a row-parallel weight is such a view
// into the full matrix, never a copy.
//
// The kernels read F16/BF16 weights by converting each element to f32 exactly as it is loaded;
// the arithmetic after that is the f32 arithmetic of the determinism contract, so a model gives
// the same bits whether its weights are stored in F16/BF16 or in F32 holding the same values.
//
// A quantized matrix's rows are whole blocks (32 values per block, 256 for the k-quants); a column
// slice of it starts and ends on block boundaries, and the kernels compute it in its blocks
// (quant_matmul.h, quant_k_matmul.h), never converting it to f32 as a whole (ReadRowF32 decodes one
// row).
//
// Thread-safety: a value; the bytes it points to are immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvferry/formats/dtype.h"

namespace kvferry::engine {

struct WeightMatrix {
  formats::DType dtype = formats::DType::kF32;  // kF32, kF16, kBF16 or a quantized type above
  const std::byte* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements from one row to the next; 0: cols (dense)

  bool quantized() const { return formats::DTypeBlockElements(dtype) > 1; }
  // Bytes of `n` elements of one row (n a multiple of the block for a quantized type).
  int64_t bytes_of(int64_t n) const {
    return n / formats::DTypeBlockElements(dtype) * formats::DTypeBlockBytes(dtype);
  }
  int64_t ld() const { return stride > 0 ? stride : cols; }
  // Bytes from one row to the next; row() computes it (a division) on every call, so a loop
  // over many rows takes it once.
  int64_t row_bytes() const { return bytes_of(ld()); }
  const std::byte* row(int64_t r) const { return data + r * row_bytes(); }
};

// Rows [first, first + count) of `m` (a column-parallel shard: output features).
WeightMatrix RowSlice(const WeightMatrix& m, int64_t first, int64_t count);
// Columns [first, first + count) of every row of `m` (a row-parallel shard: input features),
// a strided view of the same bytes.
WeightMatrix ColumnSlice(const WeightMatrix& m, int64_t first, int64_t count);

// Row r of `m` as f32 values into out[0, cols).
void ReadRowF32(const WeightMatrix& m, int64_t r, float* out);

// For a quantized matrix (dense: stride 0), the index of the first block with an F16 scale (d, or
// a minimum's scale: kernels::ScaleOffsets) that is NaN or infinite, or -1.
int64_t FirstNonFiniteBlockScale(const WeightMatrix& m);

// The whole matrix as f32 (for small tensors: norms, biases; and for tests).
std::vector<float> ToF32(const WeightMatrix& m);

// A view of `n` f32 values as a 1 x n (or rows x cols) matrix.
inline WeightMatrix F32Matrix(const float* data, int64_t rows, int64_t cols) {
  return {formats::DType::kF32, reinterpret_cast<const std::byte*>(data), rows, cols};
}

}  // namespace kvferry::engine
