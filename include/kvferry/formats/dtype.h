// Element types of the tensors in checkpoint files (safetensors, GGUF), one enum for both.
//
// The engine computes with F32, F16 and BF16. Every other type either format names is
// recognised too, so that a caller refusing a tensor can say what it is ("Q4_K", "F8_E4M3")
// rather than "unknown type".
//
// Storage is in blocks: `block_elements` values take `block_bytes` bytes. Plain types have
// blocks of one value; GGUF's quantized types have blocks of 32 to 256 values (ggml's block
// structs); safetensors' sub-byte floats pack 2 (F4) or 4 (F6) values into whole bytes.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::formats {

enum class DType : uint8_t {
  // Floating point. F8_* and F6_*/F4 are the OCP / FNUZ 8-, 6- and 4-bit floats; C64 is a
  // complex number of two F32.
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8_E4M3,
  kF8_E5M2,
  kF8_E8M0,
  kF8_E4M3FNUZ,
  kF8_E5M2FNUZ,
  kF6_E2M3,
  kF6_E3M2,
  kF4,
  kC64,
  // Integers; BOOL is one byte.
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  // GGUF's quantized blocks (ggml).
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ8_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ2_XXS,
  kIQ2_XS,
  kIQ3_XXS,
  kIQ1_S,
  kIQ4_NL,
  kIQ3_S,
  kIQ2_S,
  kIQ4_XS,
  kIQ1_M,
  kTQ1_0,
  kTQ2_0,
  kMXFP4,
  kNVFP4,
  kQ1_0,
  kQ2_0,
};

// "F32", "BF16", "Q4_K", "IQ2_XXS", "F8_E4M3", ... (safetensors' spelling; ggml's type names
// upper-cased).
std::string_view DTypeName(DType dtype);
uint32_t DTypeBlockElements(DType dtype);
uint32_t DTypeBlockBytes(DType dtype);

// Bytes a tensor of `shape` takes: elements / block_elements * block_bytes. InvalidArgument
// when a dimension is negative, the element count or the byte size does not fit in 63 bits, or
// the elements are not whole blocks.
StatusOr<uint64_t> TensorBytes(DType dtype, std::span<const int64_t> shape);

// The type a format's name or id stands for; nullopt when that format has no such type.
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);
std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type);
std::optional<uint32_t> GgmlTypeOf(DType dtype);
// Whether safetensors can hold `dtype` (its name is then DTypeName(dtype)).
bool IsSafetensorsDType(DType dtype);

}  // namespace kvferry::formats
