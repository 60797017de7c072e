#include "kvferry/common/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kvferry {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(HalfTest, BF16KnownValues) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToBF16(F(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(F32ToBF16(F(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBF16(F(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(F32ToBF16(F(0x7f7fffff)), 0x7f80);  // max float rounds to infinity
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(F(0x7f800001)))));  // signalling NaN stays NaN
  EXPECT_EQ(BF16ToF32(0x4049), F(0x40490000));
}

TEST(HalfTest, BF16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BF16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f), b);
  }
}

// The nearest bf16, ties to even, computed by comparing distances in double.
TEST(HalfTest, BF16IsNearestTiesToEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t x = rng() & 0x7f7fffffu;  // finite, non-negative
    const uint16_t lo = static_cast<uint16_t>(x >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double v = F(x);
    const double dlo = v - BF16ToF32(lo);
    // Above the largest finite bf16 the next step up is 2^128 (rounds to infinity).
    const double hi_value = hi == 0x7f80 ? std::ldexp(1.0, 128) : BF16ToF32(hi);
    const double dhi = hi_value - v;
    const uint16_t expected = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    ASSERT_EQ(F32ToBF16(F(x)), expected) << std::hex << x;
  }
}

TEST(HalfTest, F16KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // tie to even = infinity
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even = 0
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F16ToF32(0x3555), F(0x3eaaa000));
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTest, F16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = F16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), b) << std::hex << b;
  }
}

#if defined(__x86_64__)
// F16C present and its VEX (AVX) state enabled by the OS.
bool HasF16C() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned f16c = 1u << 29, avx = 1u << 28, osxsave = 1u << 27;
  if ((c & (f16c | avx | osxsave)) != (f16c | avx | osxsave)) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}

__attribute__((target("f16c"))) uint16_t HardwareF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareF32(uint16_t h) { return _cvtsh_ss(h); }

TEST(HalfTest, F16MatchesF16CHardware) {
  if (!HasF16C()) GTEST_SKIP() << "no F16C on this CPU";
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    // Bias toward the f16 range so subnormals, ties and overflow are all hit.
    uint32_t x = rng();
    if (i % 2) x = (x & 0x80ffffffu) | ((0x30u + (rng() % 0x20u)) << 24);
    const float f = F(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), HardwareF16(f)) << std::hex << x;
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = HardwareF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(F16ToF32(static_cast<uint16_t>(b))),
              std::bit_cast<uint32_t>(f));
  }
}
#endif

}  // namespace
}  // namespace kvferry
