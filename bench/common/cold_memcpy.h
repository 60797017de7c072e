// The cold-memcpy ceiling of the transfer benchmarks: one thread's memcpy of a transfer's bytes,
// in as many pieces as it has descriptors, from and to memory no cache holds. A transfer can
// at best move bytes at this rate within one host, so `kvferry bench xfer` and the pull
// benchmarks (`bench tp-pull`, `bench mla-pull`) print their figures beside it.
//
// One timing loop (MemcpyPiecesUs) serves both shapes the benchmarks report:
//   ColdMemcpyMedianUs  one transfer's bytes, each rep on a part of a large working set the
//                       previous reps did not touch (the pull benchmarks: microseconds)
//   ColdMemcpyGbps      a whole working set in pieces of one descriptor size, best of two
//                       passes (bench xfer: GB/s, 1e9 B/s)
//
// Thread-safety: pure functions of their arguments (the buffers are the caller's).
#pragma once

#include <cstdint>

namespace kvferry::bench {

// Microseconds to copy `bytes` from `src` to `dst` in `pieces` equal pieces (the last takes
// the remainder of the division), each piece at the same offset on both sides.
double MemcpyPiecesUs(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint64_t pieces);

// `bytes` in `pieces` pieces, over a working set of max(256 MiB, 4 x bytes) per side; the
// median over max(reps, 1) reps, each on a fresh part of the set (wrapping round). 0 when
// `bytes` or `pieces` is 0.
double ColdMemcpyMedianUs(uint64_t bytes, uint64_t pieces, int reps);

// GB/s of copying the first `working_set_bytes` of `src` to `dst` in pieces of `desc_bytes`
// (whole pieces only; the rate counts the whole working set), the better of two passes. The
// caller's buffers should be larger than the caches and touched already.
double ColdMemcpyGbps(uint8_t* dst, const uint8_t* src, uint64_t working_set_bytes,
                      uint64_t desc_bytes);

}  // namespace kvferry::bench
