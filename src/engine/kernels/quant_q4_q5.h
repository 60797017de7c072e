// GGUF's 4- and 5-bit block formats, Q4_0, Q5_0, Q4_1 and Q5_1 (internal): the layouts, ggml's
// reference quantizers (what llama-quantize writes) and the decoders.
//
// A block holds 32 consecutive values of a row: an F16 scale d; for the `_1` types an F16
// minimum m; for the 5-bit types 4 bytes qh holding each value's fifth bit (bit j for value j,
// little-endian); then 16 bytes of nibbles, value j < 16 in byte j's low nibble and value j + 16
// in its high one. q is the nibble (with its fifth bit), and
//
//   Q4_0: d * (q - 8)   Q5_0: d * (q - 16)   Q4_1, Q5_1: d * q + m
//
// (18, 22, 20 and 24 bytes: ggml's block_q4_0, block_q5_0, block_q4_1, block_q5_1). The matmul
// multiplies them with 8-bit activations (quant_matmul.h), as llama.cpp does.
//
// The quantizers: Q4_0/Q5_0 map the value of largest magnitude m to -8/-16 (d = m / -8, m / -16)
// and take q = min(top, trunc(x / d + 8.5 or 16.5)); Q4_1/Q5_1 take m = the block's minimum,
// d = (max - min) / 15 or 31, q = trunc((x - min) / d + 0.5); d and m stored as F16. A NaN input
// gives a defined q (the zero of the format), never an undefined conversion.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

struct BlockQ4_0 {
  uint16_t d;  // F16 bits
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ5_1) == 24,
              "ggml's block sizes");

// n values (a multiple of 32) into n / 32 blocks.
void QuantizeRowQ4_0(const float* x, int64_t n, BlockQ4_0* out);
void QuantizeRowQ5_0(const float* x, int64_t n, BlockQ5_0* out);
void QuantizeRowQ4_1(const float* x, int64_t n, BlockQ4_1* out);
void QuantizeRowQ5_1(const float* x, int64_t n, BlockQ5_1* out);

// A block's 32 values as the integers d multiplies (Q4_0: q - 8; Q5_0: q - 16; the _1 types: q).
void Q4_0Ints(const BlockQ4_0& b, int8_t out[32]);
void Q5_0Ints(const BlockQ5_0& b, int8_t out[32]);
void Q4_1Ints(const BlockQ4_1& b, int8_t out[32]);
void Q5_1Ints(const BlockQ5_1& b, int8_t out[32]);

// n values (a multiple of 32) out of n / 32 blocks.
void DequantizeRowQ4_0(const BlockQ4_0* blocks, int64_t n, float* out);
void DequantizeRowQ5_0(const BlockQ5_0* blocks, int64_t n, float* out);
void DequantizeRowQ4_1(const BlockQ4_1* blocks, int64_t n, float* out);
void DequantizeRowQ5_1(const BlockQ5_1* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
