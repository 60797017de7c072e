// Storage dtypes of the KV cache: conversions between f32 and the 16-bit formats.
//
//   bf16: the top 16 bits of an f32, rounded to nearest, ties to even; NaN stays a (quiet) NaN.
//   f16:  IEEE 754 binary16, rounded to nearest, ties to even; overflow gives infinity,
//         subnormals are produced and read exactly; NaN stays NaN.
// Portable bit manipulation (no F16C needed); results are identical on every machine, which the
// engine's determinism contract relies on.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvferry/kv/cache_spec.h"

namespace kvferry::kv {

uint16_t F32ToBF16(float value);
float BF16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);
float F16ToF32(uint16_t bits);

// Stores `src` as `dtype` into `dst` (src.size() * DTypeBytes(dtype) bytes).
void StoreAs(DType dtype, std::span<const float> src, std::byte* dst);
// Loads dst.size() values of `dtype` from `src` into f32.
void LoadFrom(DType dtype, const std::byte* src, std::span<float> dst);

}  // namespace kvferry::kv
