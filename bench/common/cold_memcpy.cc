#include "bench/common/cold_memcpy.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace kvferry::bench {

double MemcpyPiecesUs(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint64_t pieces) {
  const auto t0 = std::chrono::steady_clock::now();
  if (pieces > 0) {
    const uint64_t piece = bytes / pieces;
    for (uint64_t i = 0; i < pieces; ++i) {
      const uint64_t len = i + 1 < pieces ? piece : bytes - piece * (pieces - 1);
      std::memcpy(dst + i * piece, src + i * piece, len);
    }
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double ColdMemcpyMedianUs(uint64_t bytes, uint64_t pieces, int reps) {
  if (bytes == 0 || pieces == 0) return 0;
  const uint64_t span = std::max<uint64_t>(bytes, 1 << 20);
  const uint64_t ws = std::max<uint64_t>(uint64_t{256} << 20, 4 * span) / span * span;
  std::vector<uint8_t> src(ws, 1), dst(ws, 0);
  std::vector<double> us;
  uint64_t at = 0;
  for (int rep = 0; rep < std::max(reps, 1); ++rep, at = (at + span) % ws) {
    us.push_back(MemcpyPiecesUs(dst.data() + at, src.data() + at, bytes, pieces));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double ColdMemcpyGbps(uint8_t* dst, const uint8_t* src, uint64_t working_set_bytes,
                      uint64_t desc_bytes) {
  const uint64_t pieces = desc_bytes == 0 ? 0 : working_set_bytes / desc_bytes;
  double best = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const double us = MemcpyPiecesUs(dst, src, pieces * desc_bytes, pieces);
    best = std::max(best, static_cast<double>(working_set_bytes) / (us / 1e6) / 1e9);
  }
  return best;
}

}  // namespace kvferry::bench
