// Q8_0, GGUF's 8-bit block format (internal): the layout, its reference quantizer and decoder.
//
// A block holds 32 consecutive values of a row: an F16 scale d and 32 signed bytes q, value
// i = d * q[i] (34 bytes, ggml's block_q8_0). Rows of a Q8_0 matrix are whole blocks.
//
// QuantizeRowQ8_0 is ggml's reference quantizer (quantize_row_q8_0_ref, what llama-quantize
// writes): d = max|x| / 127, each q = round(x * (1 / d)) (halves away from zero), d stored as F16.
// The engine writes weights with it (synth-model).
//
// QuantizeActivationsQ8_0 is the quantizer llama.cpp's x86 code applies to the activations it
// multiplies with Q8_0 weights: the same d, but q = x * (127 / max|x|) rounded to nearest even.
// The two differ only where a product lies within an ulp of a half; matching llama.cpp there keeps
// the two engines' greedy tokens and margins together (tests/refs/llama_cpp_test.cc). Either
// way a row's blocks depend on that row alone.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvferry::engine::kernels {

inline constexpr int64_t kQ8_0Block = 32;

struct BlockQ8_0 {
  uint16_t d;  // F16 bits
  int8_t q[kQ8_0Block];
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml's block_q8_0 is 34 bytes");

// n values (a multiple of kQ8_0Block) into n / 32 blocks.
void QuantizeRowQ8_0(const float* x, int64_t n, BlockQ8_0* out);

// The activations' quantizer (above); same shapes. With `sums`, also each block's Q8_1 sum as
// llama.cpp's x86 code computes it: F16(d * the sum of its q), d unrounded, here as f32 (n / 32).
void QuantizeActivationsQ8_0(const float* x, int64_t n, BlockQ8_0* out, float* sums = nullptr);

// A block's 32 values q (before d applies).
void Q8_0Ints(const BlockQ8_0& b, int8_t out[32]);

// n values (a multiple of kQ8_0Block) out of n / 32 blocks.
void DequantizeRowQ8_0(const BlockQ8_0* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
