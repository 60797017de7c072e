// MatMul: y = x * W^T, the engine's only GEMM (internal).
//
//   x [M][K] row-major f32; W [N][K] row-major (one row per output feature, as checkpoints store
//   it) in F32, F16 or BF16, possibly given as several parts stacked row-wise (q, k and v
//   projections, gate and up: their outputs land side by side in y, as if the parts were one
//   matrix); y [M][N] row-major f32. A part in a GGUF block-quantized type is computed in its
//   blocks with its header's order: Q8_0, Q4_0, Q5_0, Q4_1, Q5_1 by quant_matmul.h, Q4_K, Q5_K,
//   Q6_K by quant_k_matmul.h; the others as below.
// Determinism: y[m][n] = FusedDot(x[m], W[n], K) — the fused dot product of simd.h (canonical
// order, one fused multiply-add per step), with each W element converted to f32 exactly as it is
// loaded — for every m and n, whatever M, the parts,
// the tiling, the SIMD path or the thread count. Threads split the N columns (and tiles of
// rows); no reduction is ever split.
//
// Thread-safety: pure function of its inputs; `pool` may be null (single-threaded).
#pragma once

#include <cstdint>
#include <span>

#include "engine/kernels/weight_matrix.h"

namespace kvferry::engine {
class ThreadPool;
}

namespace kvferry::engine::kernels {

// Every part must have cols == K; N = the sum of the parts' rows.
void MatMul(const float* x, int64_t M, int64_t K, std::span<const WeightMatrix> parts, float* y,
            ThreadPool* pool);

// The same with strided x and y: row m of x starts at x + m * ldx (>= K), row m of y at
// y + m * ldy (>= N). Parts may be strided too (WeightMatrix::stride). Same bits per element.
void MatMulStrided(const float* x, int64_t M, int64_t K, int64_t ldx,
                   std::span<const WeightMatrix> parts, float* y, int64_t ldy, ThreadPool* pool);

// One F32 matrix.
void MatMul(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y,
            ThreadPool* pool);

// The SIMD paths: portable (8-wide GCC vectors, the F16 conversion in software, fmaf from the C
// library per lane), AVX2 with FMA and F16C (g++ builds on CPUs with all three), and AVX-512
// (g++ builds on CPUs with AVX-512F/DQ: 4x8 tiles whose 16-lane vectors hold two outputs' 8-lane
// accumulators). All give the same bits — the conversion is exact, a fused multiply-add rounds
// once whoever computes it, and every output sees the same operations in the same order —
// so P and D on different CPU generations compute alike. kAuto takes the widest the CPU runs;
// ForceMatMulPathForTest lets a test run each path on one machine (process-wide; not to be
// called while another thread runs MatMul). A forced path the CPU or build lacks falls back to
// the next narrower one. kAmx is kAvx512 with the AMX-INT8 tiles for the 32-value block formats
// (quant_amx.h); kAvx512 leaves them out; kAuto is kAmx.
enum class MatMulPath { kAuto, kPortable, kF16c, kAvx512, kAmx };
bool MatMulHasF16cPath();
bool MatMulHasAvx512Path();
void ForceMatMulPathForTest(MatMulPath path);

// Naive reference (the FusedDot order written out per element, no tiling), for tests.
void MatMulReference(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y);

}  // namespace kvferry::engine::kernels
