// RMSNorm, RoPE and SwiGLU against their naive references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels/rmsnorm.h"
#include "engine/kernels/rope.h"
#include "engine/kernels/swiglu.h"

namespace kvferry::engine::kernels {
namespace {

using testing_util::RandomFloats;

TEST(RmsNormTest, MatchesReferenceAndIsRowwise) {
  for (int64_t dim : {5, 64, 130}) {
    const auto x = RandomFloats(7 * dim, 1, -2.0f, 2.0f);
    const auto w = RandomFloats(dim, 2, -2.0f, 2.0f);
    std::vector<float> y(x.size()), ref(x.size()), one(dim);
    RmsNorm(x.data(), 7, dim, w.data(), 1e-5f, y.data());
    RmsNormReference(x.data(), 7, dim, w.data(), 1e-5f, ref.data());
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4));
    RmsNorm(x.data() + 3 * dim, 1, dim, w.data(), 1e-5f, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), y.data() + 3 * dim, dim * 4));
    // In place.
    std::vector<float> z = x;
    RmsNorm(z.data(), 7, dim, w.data(), 1e-5f, z.data());
    EXPECT_EQ(0, std::memcmp(z.data(), y.data(), y.size() * 4));
    // Semantics: mean square of y / w is 1.
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += double(y[i] / w[i]) * (y[i] / w[i]);
    EXPECT_NEAR(ms / dim, 1.0, 1e-3);
  }
}

TEST(RopeTest, MatchesReferenceAndPreservesNorm) {
  const int32_t d = 32;
  RopeTable table(d, 300, 10000.0f);
  for (int32_t pos : {0, 1, 17, 299}) {
    auto x = RandomFloats(3 * d, pos + 1, -2.0f, 2.0f);
    auto ref = x;
    const auto orig = x;
    ApplyRope(table, pos, x.data(), 3);
    ApplyRopeReference(d, 10000.0f, pos, ref.data(), 3);
    EXPECT_EQ(0, std::memcmp(x.data(), ref.data(), x.size() * 4)) << pos;
    double n0 = 0, n1 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      n0 += double(orig[i]) * orig[i];
      n1 += double(x[i]) * x[i];
    }
    EXPECT_NEAR(n0, n1, 1e-3);
    if (pos == 0) {
      EXPECT_EQ(0, std::memcmp(x.data(), orig.data(), x.size() * 4));
    }
  }
}

TEST(SwiGluTest, MatchesReference) {
  const int64_t f = 37;
  const auto gu = RandomFloats(4 * 2 * f, 9, -2.0f, 2.0f);
  std::vector<float> y(4 * f), ref(4 * f);
  SwiGlu(gu.data(), 4, f, y.data());
  SwiGluReference(gu.data(), 4, f, ref.data());
  EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4));
  const double g = gu[0], u = gu[f];
  EXPECT_NEAR(y[0], g / (1 + std::exp(-g)) * u, 1e-5);
}

}  // namespace
}  // namespace kvferry::engine::kernels
