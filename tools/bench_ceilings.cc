#include "tools/bench_ceilings.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "engine/kernels/matmul.h"
#include "engine/kernels/simd.h"

namespace kvferry::tools {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sum of n floats (n a multiple of 32) with four independent 8-wide accumulators, so that the
// loop is bound by loads, not by the latency of one chain of adds, asking for the lines 1 KiB
// ahead as the engine's matmul asks for its next rows. Compiled twice: the baseline build's
// 8-wide vectors are two SSE2 halves, whose adds, not memory, bounded the loop (8.4 GB/s a
// thread where AVX2 read 13.6 on one machine), which made the "ceiling" lower than what the
// engine's AVX2 decode streamed.
inline __attribute__((always_inline)) double SumFloatsBody(const float* p, size_t n) {
  using engine::kernels::Load8;
  using engine::kernels::V8;
  constexpr size_t kAhead = 256;  // floats
  V8 a = {}, b = {}, c = {}, d = {};
  for (size_t i = 0; i < n; i += 32) {
    __builtin_prefetch(p + i + kAhead, 0, 3);
    __builtin_prefetch(p + i + kAhead + 16, 0, 3);
    a += Load8(p + i);
    b += Load8(p + i + 8);
    c += Load8(p + i + 16);
    d += Load8(p + i + 24);
  }
  return engine::kernels::Combine8((a + b) + (c + d));
}

__attribute__((target("avx2"), flatten)) double SumFloatsAvx2(const float* p, size_t n) {
  return SumFloatsBody(p, n);
}

double SumFloats(const float* p, size_t n) {
  if (engine::kernels::CpuHasAvx2()) return SumFloatsAvx2(p, n);
  return SumFloatsBody(p, n);
}

constexpr int kChains = 12;  // independent accumulators: > FMA latency x ports
constexpr int64_t kStepsPerRep = 1 << 16;

// kChains 8-wide FMA chains, kStepsPerRep steps: 2 * 8 * kChains * kStepsPerRep flops.
__attribute__((target("avx2,fma"))) float FmaRepAvx2(float seed) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t s = 0; s < kStepsPerRep; ++s) {
    // Unrolled, so the accumulators stay in registers: a loop over an array kept them on the
    // stack, and the store-to-load latency, not the FMA units, set the pace (a "peak" that
    // the engine's own prefill beat).
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float out[8];
  _mm256_storeu_ps(out, sum);
  return out[0];
}

// The same 16 wide (AVX-512: 2 * 16 * kChains * kStepsPerRep flops), for CPUs whose matmul
// takes its AVX-512 path: the ceiling is that of the widest path the engine runs.
__attribute__((target("avx512f"))) float FmaRepAvx512(float seed) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t s = 0; s < kStepsPerRep; ++s) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  return out[0];
}

// The same with SSE2's 4-wide multiply then add (2 * 4 * kChains * kStepsPerRep flops).
float MulAddRepBaseline(float seed) {
  __m128 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_ps(seed + static_cast<float>(c));
  const __m128 m = _mm_set1_ps(0.999999f), a = _mm_set1_ps(1e-7f);
  for (int64_t s = 0; s < kStepsPerRep; ++s) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], m), a);
  }
  __m128 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm_add_ps(sum, acc[c]);
  return _mm_cvtss_f32(sum);
}

}  // namespace

double MemoryReadGbs(int threads) {
  const size_t n = size_t{1} << 28;  // floats: 1 GiB
  std::vector<float> buf(n, 1.0f);
  std::vector<double> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t chunk = n / threads / 32 * 32;  // whole 32-float steps
        const size_t b = chunk * t, e = t + 1 == threads ? n : b + chunk;
        sums[t] = SumFloats(buf.data() + b, e - b);
      });
    }
    for (std::thread& th : pool) th.join();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / Seconds(t0, Clock::now()) / 1e9);
  }
  if (sums[0] < 0) std::fprintf(stderr, "unreachable\n");  // keep the sums observable
  return best;
}

FmaPeak FmaPeakGflops(int threads, double seconds) {
  const bool wide = engine::kernels::MatMulHasAvx512Path();
  const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int lanes = wide ? 16 : fma ? 8 : 4;
  const double flops_per_rep = 2.0 * lanes * kChains * static_cast<double>(kStepsPerRep);
  auto rep = [&](float seed) {
    return wide ? FmaRepAvx512(seed) : fma ? FmaRepAvx2(seed) : MulAddRepBaseline(seed);
  };
  std::vector<double> gflops(static_cast<size_t>(threads));
  std::atomic<float> sink{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto t0 = Clock::now();
      int64_t reps = 0;
      float keep = 0;
      while (Seconds(t0, Clock::now()) < seconds || reps < 1) {
        keep += rep(static_cast<float>(t));
        ++reps;
      }
      gflops[t] = flops_per_rep * static_cast<double>(reps) / Seconds(t0, Clock::now()) / 1e9;
      sink.store(keep, std::memory_order_relaxed);  // keep the chains observable
    });
  }
  for (std::thread& th : pool) th.join();
  FmaPeak peak;
  for (double g : gflops) peak.gflops += g;
  peak.isa = wide ? "avx512" : fma ? "avx2+fma" : "baseline";
  return peak;
}

}  // namespace kvferry::tools
