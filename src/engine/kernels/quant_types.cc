#include "engine/kernels/quant_types.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "engine/kernels/quant_k.h"
#include "engine/kernels/quant_q4_q5.h"
#include "engine/kernels/quant_q8_0.h"

namespace kvferry::engine::kernels {
namespace {

using formats::DType;

constexpr DType kComputed[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_1,
                               DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

template <typename Block>
Block* As(std::byte* p) {
  return reinterpret_cast<Block*>(p);
}
template <typename Block>
const Block* As(const std::byte* p) {
  return reinterpret_cast<const Block*>(p);
}

}  // namespace

std::span<const DType> ComputedQuantTypes() { return kComputed; }

bool IsComputedQuantType(DType dtype) {
  return std::find(std::begin(kComputed), std::end(kComputed), dtype) != std::end(kComputed);
}

std::optional<DType> ComputedQuantTypeFromName(std::string_view name) {
  for (DType d : kComputed) {
    std::string lower(formats::DTypeName(d));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == name) return d;
  }
  return std::nullopt;
}

void QuantizeRow(DType dtype, const float* x, int64_t n, std::byte* out) {
  switch (dtype) {
    case DType::kQ8_0:
      return QuantizeRowQ8_0(x, n, As<BlockQ8_0>(out));
    case DType::kQ4_0:
      return QuantizeRowQ4_0(x, n, As<BlockQ4_0>(out));
    case DType::kQ5_0:
      return QuantizeRowQ5_0(x, n, As<BlockQ5_0>(out));
    case DType::kQ4_1:
      return QuantizeRowQ4_1(x, n, As<BlockQ4_1>(out));
    case DType::kQ5_1:
      return QuantizeRowQ5_1(x, n, As<BlockQ5_1>(out));
    case DType::kQ4_K:
      return QuantizeRowQ4_K(x, n, As<BlockQ4_K>(out));
    case DType::kQ5_K:
      return QuantizeRowQ5_K(x, n, As<BlockQ5_K>(out));
    case DType::kQ6_K:
      return QuantizeRowQ6_K(x, n, As<BlockQ6_K>(out));
    default:
      std::abort();  // precondition: a computed type
  }
}

std::span<const int> ScaleOffsets(DType dtype) {
  static constexpr int kD[] = {0}, kDm[] = {0, 2}, kQ6[] = {208};
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return kDm;
    case DType::kQ6_K:
      return kQ6;
    default:
      return kD;
  }
}

void DequantizeRow(DType dtype, const std::byte* blocks, int64_t n, float* out) {
  switch (dtype) {
    case DType::kQ8_0:
      return DequantizeRowQ8_0(As<BlockQ8_0>(blocks), n, out);
    case DType::kQ4_0:
      return DequantizeRowQ4_0(As<BlockQ4_0>(blocks), n, out);
    case DType::kQ5_0:
      return DequantizeRowQ5_0(As<BlockQ5_0>(blocks), n, out);
    case DType::kQ4_1:
      return DequantizeRowQ4_1(As<BlockQ4_1>(blocks), n, out);
    case DType::kQ5_1:
      return DequantizeRowQ5_1(As<BlockQ5_1>(blocks), n, out);
    case DType::kQ4_K:
      return DequantizeRowQ4_K(As<BlockQ4_K>(blocks), n, out);
    case DType::kQ5_K:
      return DequantizeRowQ5_K(As<BlockQ5_K>(blocks), n, out);
    case DType::kQ6_K:
      return DequantizeRowQ6_K(As<BlockQ6_K>(blocks), n, out);
    default:
      std::abort();  // precondition: a computed type
  }
}

}  // namespace kvferry::engine::kernels
