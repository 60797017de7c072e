// What this machine can do at most, measured in the benchmark's own run so that a benchmark's
// figure is printed beside its ceiling (docs/benchmarks.md): the memory-read bandwidth a
// memory-bound decode step can stream at most, and the single-precision FMA peak a
// compute-bound prefill can reach at most. For `kvferry bench engine` (tools/cmd_bench_engine.cc)
// only.
//
// Thread-safety: each call runs its own threads and shares nothing.
#pragma once

#include <string>

namespace kvferry::tools {

// `threads` threads each sum their share of a 1 GiB buffer (far beyond any cache) with 8-wide
// vector adds (AVX2 where the CPU has it) and prefetches ahead; the best of 5 passes, in GB/s.
double MemoryReadGbs(int threads);

struct FmaPeak {
  double gflops = 0;  // 2 flops per fused multiply-add, all threads
  // "avx512" (16-wide vfmadd; where the matmul takes its AVX-512 path), "avx2+fma" (8-wide
  // vfmadd), or "baseline" (4-wide multiply then add)
  std::string isa;
};

// `threads` threads each run independent chains of vector multiply-adds for about `seconds`
// (enough chains to hide the latency); the sum over threads, in GFLOP/s.
FmaPeak FmaPeakGflops(int threads, double seconds);

}  // namespace kvferry::tools
