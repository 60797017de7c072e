// Fixed-order vector arithmetic shared by the kernels (internal).
//
// V8 is a GCC vector of 8 floats. Each lane is an independent IEEE single-precision operation
// (no FMA: -ffp-contract=off), so the same source compiled for SSE2 or AVX2 gives bit-identical
// results; only speed differs.
//
// The canonical dot product (Dot) of two length-n vectors, used by every kernel that reduces:
//   lane l accumulates x[k]*y[k] for k = l, l+8, l+16, ... < n8 (n8 = n rounded down to 8),
//   in increasing k; then s = ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)); then the tail
//   k = n8 .. n-1 is added one by one in increasing k.
// The order depends only on n, never on where the vectors come from.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

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

// True when the CPU runs AVX2 (kernels then use their AVX2-compiled copy; same results).
bool CpuHasAvx2();

}  // namespace kvferry::engine::kernels
