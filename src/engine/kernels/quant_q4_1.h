// Q4_1 and Q5_1, GGUF's 4- and 5-bit block formats with a minimum (internal): the layouts, their
// reference quantizers and decoders.
//
// A block holds 32 consecutive values of a row: an F16 scale d, an F16 minimum m, then Q4_1's 16
// bytes of nibbles (20 bytes, ggml's block_q4_1) or Q5_1's 4 bytes of fifth bits and 16 bytes of
// nibbles, laid out as Q5_0's (24 bytes, block_q5_1); value i = d * q_i + m, q_i unsigned
// (0..15, 0..31), value j < 16 in byte j's low nibble, value j + 16 in its high one. The matmul
// multiplies them with Q8_1 activations: Q8_0's blocks plus s = d * (the sum of the block's q),
// stored as F16 (quant_matmul.h), as llama.cpp does.
//
// The quantizers are ggml's reference ones (quantize_row_q4_1_ref, quantize_row_q5_1_ref, what
// llama-quantize writes): d = (max - min) / 15 (31), m = min, q = trunc((x - min) / d + 0.5),
// Q4_1's at most 15; d and m stored as F16.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

struct BlockQ4_1 {
  uint16_t d, m;  // F16 bits
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "ggml's block_q4_1 is 20 bytes");

struct BlockQ5_1 {
  uint16_t d, m;  // F16 bits
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "ggml's block_q5_1 is 24 bytes");

// n values (a multiple of 32) into n / 32 blocks.
void QuantizeRowQ4_1(const float* x, int64_t n, BlockQ4_1* out);
void QuantizeRowQ5_1(const float* x, int64_t n, BlockQ5_1* out);

// A block's 32 values q (before d and m apply).
void Q4_1Ints(const BlockQ4_1& b, int8_t out[32]);
void Q5_1Ints(const BlockQ5_1& b, int8_t out[32]);

// n values (a multiple of 32) out of n / 32 blocks.
void DequantizeRowQ4_1(const BlockQ4_1* blocks, int64_t n, float* out);
void DequantizeRowQ5_1(const BlockQ5_1* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
