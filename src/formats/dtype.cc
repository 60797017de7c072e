#include "kvferry/formats/dtype.h"

#include <array>
#include <limits>
#include <string>

namespace kvferry::formats {

namespace {

inline constexpr int64_t kNoGgml = -1;

struct Row {
  DType dtype;
  std::string_view name;
  uint32_t block_elements;
  uint32_t block_bytes;
  int64_t ggml_type;  // kNoGgml: not a GGUF type
  bool safetensors;
};

// Block sizes of the quantized types are ggml's (ggml-common.h, the static_asserts on the
// block structs); the ids are ggml.h's enum ggml_type, which GGUF files store.
constexpr std::array kRows = {
    Row{DType::kF64, "F64", 1, 8, 28, true},
    Row{DType::kF32, "F32", 1, 4, 0, true},
    Row{DType::kF16, "F16", 1, 2, 1, true},
    Row{DType::kBF16, "BF16", 1, 2, 30, true},
    Row{DType::kF8_E4M3, "F8_E4M3", 1, 1, kNoGgml, true},
    Row{DType::kF8_E5M2, "F8_E5M2", 1, 1, kNoGgml, true},
    Row{DType::kF8_E8M0, "F8_E8M0", 1, 1, kNoGgml, true},
    Row{DType::kF8_E4M3FNUZ, "F8_E4M3FNUZ", 1, 1, kNoGgml, true},
    Row{DType::kF8_E5M2FNUZ, "F8_E5M2FNUZ", 1, 1, kNoGgml, true},
    Row{DType::kF6_E2M3, "F6_E2M3", 4, 3, kNoGgml, true},
    Row{DType::kF6_E3M2, "F6_E3M2", 4, 3, kNoGgml, true},
    Row{DType::kF4, "F4", 2, 1, kNoGgml, true},
    Row{DType::kC64, "C64", 1, 8, kNoGgml, true},
    Row{DType::kBool, "BOOL", 1, 1, kNoGgml, true},
    Row{DType::kU8, "U8", 1, 1, kNoGgml, true},
    Row{DType::kI8, "I8", 1, 1, 24, true},
    Row{DType::kU16, "U16", 1, 2, kNoGgml, true},
    Row{DType::kI16, "I16", 1, 2, 25, true},
    Row{DType::kU32, "U32", 1, 4, kNoGgml, true},
    Row{DType::kI32, "I32", 1, 4, 26, true},
    Row{DType::kU64, "U64", 1, 8, kNoGgml, true},
    Row{DType::kI64, "I64", 1, 8, 27, true},
    Row{DType::kQ4_0, "Q4_0", 32, 18, 2, false},
    Row{DType::kQ4_1, "Q4_1", 32, 20, 3, false},
    Row{DType::kQ5_0, "Q5_0", 32, 22, 6, false},
    Row{DType::kQ5_1, "Q5_1", 32, 24, 7, false},
    Row{DType::kQ8_0, "Q8_0", 32, 34, 8, false},
    Row{DType::kQ8_1, "Q8_1", 32, 36, 9, false},
    Row{DType::kQ2_K, "Q2_K", 256, 84, 10, false},
    Row{DType::kQ3_K, "Q3_K", 256, 110, 11, false},
    Row{DType::kQ4_K, "Q4_K", 256, 144, 12, false},
    Row{DType::kQ5_K, "Q5_K", 256, 176, 13, false},
    Row{DType::kQ6_K, "Q6_K", 256, 210, 14, false},
    Row{DType::kQ8_K, "Q8_K", 256, 292, 15, false},
    Row{DType::kIQ2_XXS, "IQ2_XXS", 256, 66, 16, false},
    Row{DType::kIQ2_XS, "IQ2_XS", 256, 74, 17, false},
    Row{DType::kIQ3_XXS, "IQ3_XXS", 256, 98, 18, false},
    Row{DType::kIQ1_S, "IQ1_S", 256, 50, 19, false},
    Row{DType::kIQ4_NL, "IQ4_NL", 32, 18, 20, false},
    Row{DType::kIQ3_S, "IQ3_S", 256, 110, 21, false},
    Row{DType::kIQ2_S, "IQ2_S", 256, 82, 22, false},
    Row{DType::kIQ4_XS, "IQ4_XS", 256, 136, 23, false},
    Row{DType::kIQ1_M, "IQ1_M", 256, 56, 29, false},
    Row{DType::kTQ1_0, "TQ1_0", 256, 54, 34, false},
    Row{DType::kTQ2_0, "TQ2_0", 256, 66, 35, false},
    Row{DType::kMXFP4, "MXFP4", 32, 17, 39, false},
    Row{DType::kNVFP4, "NVFP4", 64, 36, 40, false},
    Row{DType::kQ1_0, "Q1_0", 128, 18, 41, false},
    Row{DType::kQ2_0, "Q2_0", 64, 18, 42, false},
};

// The table is in enum order, so a DType indexes its row.
constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kRows.size(); ++i) {
    if (static_cast<size_t>(kRows[i].dtype) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder());
static_assert(static_cast<size_t>(DType::kQ2_0) + 1 == kRows.size());

const Row& RowOf(DType dtype) { return kRows[static_cast<size_t>(dtype)]; }

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string_view DTypeName(DType dtype) { return RowOf(dtype).name; }
uint32_t DTypeBlockElements(DType dtype) { return RowOf(dtype).block_elements; }
uint32_t DTypeBlockBytes(DType dtype) { return RowOf(dtype).block_bytes; }

StatusOr<uint64_t> TensorBytes(DType dtype, std::span<const int64_t> shape) {
  constexpr uint64_t kLimit = std::numeric_limits<int64_t>::max();
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("shape " + ShapeString(shape) + " has a negative size");
    if (d != 0 && elements > kLimit / static_cast<uint64_t>(d)) {
      return InvalidArgumentError("shape " + ShapeString(shape) + " has more than 2^63 elements");
    }
    elements *= static_cast<uint64_t>(d);
  }
  const Row& row = RowOf(dtype);
  if (elements % row.block_elements != 0) {
    return InvalidArgumentError(std::to_string(elements) + " elements of " + std::string(row.name) +
                                " are not whole blocks of " + std::to_string(row.block_elements));
  }
  const uint64_t blocks = elements / row.block_elements;
  if (blocks > kLimit / row.block_bytes) {
    return InvalidArgumentError("shape " + ShapeString(shape) + " of " + std::string(row.name) +
                                " takes more than 2^63 bytes");
  }
  return blocks * row.block_bytes;
}

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const Row& row : kRows) {
    if (row.safetensors && row.name == name) return row.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type) {
  for (const Row& row : kRows) {
    if (row.ggml_type == static_cast<int64_t>(ggml_type)) return row.dtype;
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlTypeOf(DType dtype) {
  const Row& row = RowOf(dtype);
  if (row.ggml_type == kNoGgml) return std::nullopt;
  return static_cast<uint32_t>(row.ggml_type);
}

bool IsSafetensorsDType(DType dtype) { return RowOf(dtype).safetensors; }

}  // namespace kvferry::formats
