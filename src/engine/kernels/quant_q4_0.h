// Q4_0, GGUF's 4-bit block format (internal): the layout, its reference quantizer and decoder.
//
// A block holds 32 consecutive values of a row: an F16 scale d and 16 bytes of nibbles; value
// j (j < 16) = d * ((qs[j] & 15) - 8), value j + 16 = d * ((qs[j] >> 4) - 8) (18 bytes, ggml's
// block_q4_0). Rows of a Q4_0 matrix are whole blocks. The matmul multiplies it with Q8_0
// activations (quant_matmul.h), as llama.cpp does.
//
// QuantizeRowQ4_0 is ggml's reference quantizer (quantize_row_q4_0_ref, what llama-quantize
// writes): the value of largest magnitude, m, gives d = m / -8 (so m itself maps to 0, the
// value -8), each q = min(15, trunc(x / d + 8.5)), d stored as F16.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

struct BlockQ4_0 {
  uint16_t d;  // F16 bits
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18, "ggml's block_q4_0 is 18 bytes");

// n values (a multiple of 32) into n / 32 blocks.
void QuantizeRowQ4_0(const float* x, int64_t n, BlockQ4_0* out);

// A block's 32 values q - 8 (before d applies).
void Q4_0Ints(const BlockQ4_0& b, int8_t out[32]);

// n values (a multiple of 32) out of n / 32 blocks.
void DequantizeRowQ4_0(const BlockQ4_0* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
