// libFuzzer target: the GGUF quantized block decoders (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K,
// Q6_K) and the quantized matmuls (src/engine/kernels/quant_*.h, quant_matmul.h,
// quant_k_matmul.h) over arbitrary block bytes.
//
// Input: byte 0 picks the type (bits 4-6: Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K) and the
// rows of x (bits 1-3: 1..8);
// byte 1 the outputs N (1..24); byte 2 the blocks per row (1..8) and a scale for x (bits 3-7);
// then x's values (one signed byte each, times the scale), then W's blocks as raw bytes (what a
// file holds: any scale, any nibble, Q8_0's -128 included), zero-padded when the input is short.
//
// Properties: no crash or sanitizer report; FirstNonFiniteBlockScale finds a non-finite F16 scale
// (d, or a minimum's scale) exactly when a block has one; every row decodes; and where every
// scale is finite, MatMul (every SIMD path this build has) equals QuantReference or
// KQuantReference bit for bit.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_k_matmul.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/kernels/weight_matrix.h"
#include "kvferry/common/half.h"

namespace {

using kvferry::formats::DType;
using namespace kvferry::engine;
using namespace kvferry::engine::kernels;

// Where each type's F16 scales lie in its block (ggml's layouts, written out here).
std::vector<int> ScaleBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

bool AnyNonFiniteScale(DType dtype, const std::vector<std::byte>& w, int64_t blocks,
                       int64_t block_bytes) {
  for (int64_t b = 0; b < blocks; ++b) {
    for (const int offset : ScaleBytes(dtype)) {
      uint16_t d;
      std::memcpy(&d, w.data() + b * block_bytes + offset, 2);
      if (!std::isfinite(kvferry::F16ToF32(d))) return true;
    }
  }
  return false;
}

void Reference(const std::vector<float>& x, int64_t M, int64_t K, const WeightMatrix& m, float* y) {
  if (IsKQuant(m.dtype)) {
    QuantizedRowsK xq;
    QuantizeRowsK(x.data(), M, K, K, &xq);
    KQuantReference(xq, m, y, m.rows);
  } else {
    QuantizedRows xq;
    QuantizeRows(x.data(), M, K, K, &xq);
    QuantReference(xq, m, y, m.rows);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const DType types[8] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_1,
                          DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  const DType dtype = types[(data[0] >> 4) & 7];
  const int64_t M = 1 + ((data[0] >> 1) & 7), N = 1 + data[1] % 24, nb = 1 + (data[2] & 7);
  const float x_scale = std::ldexp(1.0f, (data[2] >> 3) - 16);
  const int64_t K = nb * kvferry::formats::DTypeBlockElements(dtype);
  const int64_t block_bytes = kvferry::formats::DTypeBlockBytes(dtype);
  size_t at = 3;
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& v : x) v = at < size ? static_cast<int8_t>(data[at++]) * x_scale : 0.0f;
  std::vector<std::byte> w(static_cast<size_t>(N * nb * block_bytes));
  for (std::byte& b : w) b = at < size ? std::byte{data[at++]} : std::byte{0};
  const WeightMatrix m{dtype, w.data(), N, K};

  const bool non_finite = AnyNonFiniteScale(dtype, w, N * nb, block_bytes);
  if ((FirstNonFiniteBlockScale(m) >= 0) != non_finite) std::abort();
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) ReadRowF32(m, n, row.data());
  if (non_finite) return 0;  // the loader refuses such a tensor

  std::vector<float> ref(static_cast<size_t>(M * N)), y(ref.size());
  Reference(x, M, K, m, ref.data());
  for (MatMulPath path :
       {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512, MatMulPath::kAmx}) {
    ForceMatMulPathForTest(path);
    MatMul(x.data(), M, K, {&m, 1}, y.data(), nullptr);
    if (std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) != 0) std::abort();
  }
  ForceMatMulPathForTest(MatMulPath::kAuto);
  return 0;
}
