#include "bench/common/cold_memcpy.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::bench {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

TEST(ColdMemcpyTest, PiecesCopyEveryByteTheLastTakingTheRemainder) {
  const std::vector<uint8_t> src = Pattern(1000);
  std::vector<uint8_t> dst(1000, 0);
  EXPECT_GE(MemcpyPiecesUs(dst.data(), src.data(), 1000, 7), 0.0);  // 6 x 142, then 148
  EXPECT_EQ(dst, src);
}

TEST(ColdMemcpyTest, NoPiecesCopyNothing) {
  const std::vector<uint8_t> src = Pattern(64);
  std::vector<uint8_t> dst(64, 0);
  MemcpyPiecesUs(dst.data(), src.data(), 64, 0);
  EXPECT_EQ(dst, std::vector<uint8_t>(64, 0));
}

TEST(ColdMemcpyTest, MedianOfNothingIsZero) {
  EXPECT_EQ(ColdMemcpyMedianUs(0, 4, 3), 0.0);
  EXPECT_EQ(ColdMemcpyMedianUs(4096, 0, 3), 0.0);
}

TEST(ColdMemcpyTest, MedianAndRateArePositive) {
  EXPECT_GT(ColdMemcpyMedianUs(1 << 20, 16, 3), 0.0);
  const uint64_t ws = 4 << 20;
  const std::vector<uint8_t> src = Pattern(ws);
  std::vector<uint8_t> dst(ws, 0);
  EXPECT_GT(ColdMemcpyGbps(dst.data(), src.data(), ws, 64 << 10), 0.0);
  EXPECT_EQ(dst, src);  // whole pieces cover the working set exactly
}

}  // namespace
}  // namespace kvferry::bench
