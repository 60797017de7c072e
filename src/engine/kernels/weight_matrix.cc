#include "engine/kernels/weight_matrix.h"

#include <cstring>

#include "engine/kernels/quant_types.h"
#include "kvferry/common/half.h"

namespace kvferry::engine {

void ReadRowF32(const WeightMatrix& m, int64_t r, float* out) {
  const std::byte* p = m.row(r);
  if (m.dtype == formats::DType::kF32) {
    std::memcpy(out, p, static_cast<size_t>(m.cols) * 4);
    return;
  }
  if (m.quantized()) {
    kernels::DequantizeRow(m.dtype, p, m.cols, out);
    return;
  }
  for (int64_t c = 0; c < m.cols; ++c) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * c, 2);
    out[c] = m.dtype == formats::DType::kBF16 ? BF16ToF32(bits) : F16ToF32(bits);
  }
}

WeightMatrix RowSlice(const WeightMatrix& m, int64_t first, int64_t count) {
  WeightMatrix out = m;
  out.data = m.row(first);
  out.rows = count;
  return out;
}

WeightMatrix ColumnSlice(const WeightMatrix& m, int64_t first, int64_t count) {
  WeightMatrix out = m;
  out.data = m.data + m.bytes_of(first);
  out.cols = count;
  out.stride = m.ld();
  return out;
}

int64_t FirstNonFiniteBlockScale(const WeightMatrix& m) {
  const int64_t blocks = m.rows * m.cols / formats::DTypeBlockElements(m.dtype);
  const int64_t bytes = formats::DTypeBlockBytes(m.dtype);
  const std::span<const int> offsets = kernels::ScaleOffsets(m.dtype);
  for (int64_t b = 0; b < blocks; ++b) {
    for (const int offset : offsets) {
      uint16_t d;
      std::memcpy(&d, m.data + b * bytes + offset, 2);
      if ((d & 0x7c00) == 0x7c00) return b;  // exponent all ones: inf or NaN
    }
  }
  return -1;
}

std::vector<float> ToF32(const WeightMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) ReadRowF32(m, r, out.data() + r * m.cols);
  return out;
}

}  // namespace kvferry::engine
