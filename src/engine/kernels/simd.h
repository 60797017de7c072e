// Fixed-order vector arithmetic shared by the kernels (internal).
//
// V8 is a GCC vector of 8 floats. Each lane is an independent IEEE single-precision operation
// (never an implicit FMA: -ffp-contract=off; the fused multiply-adds below are written out), so
// the same source compiled for SSE2, AVX2 or AVX-512 gives bit-identical results; only speed
// differs.
//
// The canonical dot product (Dot) of two length-n vectors, used by every kernel that reduces:
//   lane l accumulates x[k]*y[k] for k = l, l+8, l+16, ... < n8 (n8 = n rounded down to 8),
//   in increasing k; then s = ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)); then the tail
//   k = n8 .. n-1 is added one by one in increasing k.
// The order depends only on n, never on where the vectors come from.
//
// The fused dot product (FusedDot), used by the matmul and by attention's scores: the same
// order, but each step is one fused multiply-add (x[k]*y[k] + acc rounded once, as the FMA
// instruction computes it): lane l: acc_l = fma(x[k], y[k], acc_l); tail: s = fma(x[k], y[k], s).
// The kernels compute it with the FMA instruction where the CPU has one (HwFma, in their AVX2
// code) and with the C library's fmaf otherwise (SoftFma): the same bits, since both round once.
// SoftFma is a call per lane: correct everywhere, fast nowhere; only CPUs without AVX2 and FMA,
// and clang builds (the sanitizers), take it. Dot (unfused) remains for RMSNorm's sum of squares
// and MLA's scores, which have no per-ISA copy.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvferry::engine::kernels {

typedef float V8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) V8 Load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline __attribute__((always_inline)) void Store8(float* p, V8 v) { std::memcpy(p, &v, sizeof(v)); }
inline __attribute__((always_inline)) V8 Splat8(float x) { return V8{x, x, x, x, x, x, x, x}; }

// The fixed lane combine of the canonical dot product.
inline __attribute__((always_inline)) float Combine8(V8 a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// Canonical dot product (see above).
inline __attribute__((always_inline)) float Dot(const float* x, const float* y, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  V8 acc = Splat8(0.0f);
  for (int64_t k = 0; k < n8; k += 8) acc += Load8(x + k) * Load8(y + k);
  float s = Combine8(acc);
  for (int64_t k = n8; k < n; ++k) s += x[k] * y[k];
  return s;
}

// Combine8 of eight vectors at once: lane i of the result is Combine8(v[i]), bit for bit (the
// same pairs added in the same tree: lanes (0,1) (2,3) (4,5) (6,7), then pairs of those, then the
// halves), in a few shuffles instead of seven scalar adds per vector.
inline __attribute__((always_inline)) V8 PairSums(V8 a, V8 b) {
  // [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]
  return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) +
         __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
}
inline __attribute__((always_inline)) V8 Combine8x8(const V8 v[8]) {
  const V8 t0 = PairSums(PairSums(v[0], v[1]), PairSums(v[2], v[3]));
  const V8 t1 = PairSums(PairSums(v[4], v[5]), PairSums(v[6], v[7]));
  return __builtin_shufflevector(t0, t1, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(t0, t1, 4, 5, 6, 7, 12, 13, 14, 15);
}

// Fused multiply-add lane by lane through the C library (see above): a * b + c, rounded once.
// A build for FMA CPUs (the clang sanitizer builds: CMakeLists.txt) computes it with the
// instruction instead.
struct SoftFma {
  static inline __attribute__((always_inline)) V8 Fma(V8 a, V8 b, V8 c) {
#if defined(__FMA__) && defined(__AVX__)
    return _mm256_fmadd_ps(a, b, c);
#else
    V8 r;
    for (int l = 0; l < 8; ++l) r[l] = __builtin_fmaf(a[l], b[l], c[l]);
    return r;
#endif
  }
  static inline __attribute__((always_inline)) float Fma1(float a, float b, float c) {
    return __builtin_fmaf(a, b, c);
  }
};

#if defined(__x86_64__) && !defined(__clang__)
#define KVF_HW_FMA 1
// The FMA instruction (same bits as SoftFma: both round once). Only for code compiled with
// target("avx2,fma") (g++: its `flatten` entry points inline these; clang refuses to inline a
// target function into the shared templates, so clang builds take SoftFma).
struct HwFma {
  static inline __attribute__((target("avx2,fma"))) V8 Fma(V8 a, V8 b, V8 c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  static inline __attribute__((target("avx2,fma"))) float Fma1(float a, float b, float c) {
    return __builtin_fmaf(a, b, c);
  }
};
#endif

// The fused dot product (see above); A: SoftFma or HwFma.
template <typename A>
inline __attribute__((always_inline)) float FusedDot(const float* x, const float* y, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  V8 acc = Splat8(0.0f);
  for (int64_t k = 0; k < n8; k += 8) acc = A::Fma(Load8(x + k), Load8(y + k), acc);
  float s = Combine8(acc);
  for (int64_t k = n8; k < n; ++k) s = A::Fma1(x[k], y[k], s);
  return s;
}

// True when the CPU runs AVX2, FMA and F16C (kernels then use their AVX2-compiled copy; same
// results).
bool CpuHasAvx2();

// True when the CPU also runs AVX-512 F/BW/VL/DQ with VNNI (the quantized kernels' vpdpbusd
// copies; same results).
bool CpuHasAvx512Vnni();

}  // namespace kvferry::engine::kernels
