// GGUF's k-quant formats, Q4_K, Q5_K and Q6_K, and Q8_K, the 8-bit activation blocks llama.cpp
// multiplies them with (internal): the layouts, ggml's reference quantizers (what llama-quantize
// writes without an importance matrix) and the decoders.
//
// A super-block holds 256 consecutive values of a row, in sub-blocks that each have their own
// small integer scale (and, for Q4_K and Q5_K, minimum) under one F16 scale d (and dmin):
//
//   Q4_K (144 bytes): d, dmin, 12 bytes of 6-bit scales sc_j and minimums m_j for 8 sub-blocks of
//     32, then 128 bytes of nibbles (each 64 values: 32 bytes, value l in byte l's low nibble,
//     value 32 + l in its high one). Value = d * sc_j * q - dmin * m_j, q in 0..15.
//   Q5_K (176 bytes): as Q4_K, with 32 bytes qh of fifth bits between the scales and the nibbles
//     (value 64 c + l takes bit 2c of qh[l], value 64 c + 32 + l bit 2c + 1); q in 0..31.
//   Q6_K (210 bytes): 128 bytes of low nibbles, 64 bytes of high bit pairs, 16 signed 8-bit
//     scales (one per 16 values), then d. Value = d * sc_g * (q - 32), q in 0..63.
//   Q8_K (292 bytes, never in a file): an f32 scale d, 256 signed bytes, and the sums of each 16.
//
// For the matmul (quant_k_matmul.h) a weight super-block is read as KInts: 256 integers w_i and,
// per group g of 16 values, an integer scale s_g and minimum n_g, so that value i of group g is
// d * s_g * w_i - dmin * n_g (Q6_K: w_i = q - 32, n_g = 0, dmin = 0).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvferry::engine::kernels {

inline constexpr int64_t kSuperBlock = 256;

struct BlockQ4_K {
  uint16_t d, dmin;  // F16 bits
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t q[kSuperBlock];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
                  sizeof(BlockQ8_K) == 292,
              "ggml's k-quant block sizes");

// A weight super-block as the integers the matmul multiplies (above).
struct KInts {
  int8_t w[kSuperBlock];
  int16_t scales[16];
  int16_t mins[16];
  float d = 0.0f, dmin = 0.0f;
};
void Q4_KInts(const BlockQ4_K& b, KInts* out);
void Q5_KInts(const BlockQ5_K& b, KInts* out);
void Q6_KInts(const BlockQ6_K& b, KInts* out);

// ggml's reference quantizers; n values (a multiple of 256) into n / 256 super-blocks. Q4_K and
// Q5_K fit each sub-block's scale and minimum by a weighted least-squares search over candidate
// scales, then quantize those to 6 bits under d and dmin; Q6_K fits each 16 values' signed scale
// (a search of 19 candidates) and quantizes the scales to 8 bits under d. A NaN input gives a
// defined block, never an undefined conversion.
void QuantizeRowQ4_K(const float* x, int64_t n, BlockQ4_K* out);
void QuantizeRowQ5_K(const float* x, int64_t n, BlockQ5_K* out);
void QuantizeRowQ6_K(const float* x, int64_t n, BlockQ6_K* out);

// The activations' quantizer, as llama.cpp applies it before a k-quant dot (its reference, which
// its x86 code calls): per 256 values, max = the first value of largest magnitude (signed),
// q = min(127, round-half-even(x * (-127 / max))), d = 1 / (-127 / max) as f32, and each 16
// values' sum of q. All zero gives d = 0.
void QuantizeActivationsQ8_K(const float* x, int64_t n, BlockQ8_K* out);

// n values (a multiple of 256) out of n / 256 super-blocks.
void DequantizeRowQ4_K(const BlockQ4_K* blocks, int64_t n, float* out);
void DequantizeRowQ5_K(const BlockQ5_K* blocks, int64_t n, float* out);
void DequantizeRowQ6_K(const BlockQ6_K* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
