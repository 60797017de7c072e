// Q5_0, GGUF's 5-bit block format (internal): the layout, its reference quantizer and decoder.
//
// A block holds 32 consecutive values of a row: an F16 scale d, 4 bytes qh holding each value's
// fifth bit (bit j for value j, little-endian), and 16 bytes of nibbles as in Q4_0; value j
// (j < 16) = d * (((qs[j] & 15) | bit j << 4) - 16), value j + 16 = d * (((qs[j] >> 4) |
// bit j + 16 << 4) - 16) (22 bytes, ggml's block_q5_0). The matmul multiplies it with Q8_0
// activations (quant_matmul.h), as llama.cpp does.
//
// QuantizeRowQ5_0 is ggml's reference quantizer (quantize_row_q5_0_ref): the value of largest
// magnitude, m, gives d = m / -16, each q = min(31, trunc(x / d + 16.5)), d stored as F16.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

struct BlockQ5_0 {
  uint16_t d;  // F16 bits
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "ggml's block_q5_0 is 22 bytes");

// n values (a multiple of 32) into n / 32 blocks.
void QuantizeRowQ5_0(const float* x, int64_t n, BlockQ5_0* out);

// Block `b`'s 32 values as the integers -16 .. 15 the scale multiplies.
void Q5_0Ints(const BlockQ5_0& b, int8_t out[32]);

// n values (a multiple of 32) out of n / 32 blocks.
void DequantizeRowQ5_0(const BlockQ5_0* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
