// 16-bit floats: conversions between f32 and f16 / bf16.
//
//   bf16: the top 16 bits of an f32, rounded to nearest, ties to even; NaN stays a (quiet) NaN.
//   f16:  IEEE 754 binary16, rounded to nearest, ties to even; overflow gives infinity,
//         subnormals are produced and read exactly; NaN stays NaN.
// Portable bit manipulation (no F16C needed); results are identical on every machine, which the
// engine's determinism contract relies on. Here rather than in kv because both the KV cache
// (kv/dtype.h re-exports them) and the checkpoint readers (formats) convert.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvferry {

uint16_t F32ToBF16(float value);
float BF16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);
float F16ToF32(uint16_t bits);

}  // namespace kvferry
