#include "engine/kernels/rope.h"

#include <cmath>

namespace kvferry::engine::kernels {

namespace {
double InvFreq(int32_t i, int32_t head_dim, float theta) {
  return std::pow(static_cast<double>(theta), -2.0 * i / static_cast<double>(head_dim));
}
}  // namespace

RopeTable::RopeTable(int32_t head_dim, int32_t max_position, float theta,
                     const std::vector<float>& factors)
    : head_dim_(head_dim), max_position_(max_position) {
  const int32_t half = head_dim / 2;
  cos_.resize(static_cast<size_t>(max_position) * half);
  sin_.resize(cos_.size());
  for (int32_t p = 0; p < max_position; ++p) {
    for (int32_t i = 0; i < half; ++i) {
      const double factor = factors.empty() ? 1.0 : static_cast<double>(factors[i]);
      const double angle = static_cast<double>(p) * (InvFreq(i, head_dim, theta) / factor);
      cos_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
      sin_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void ApplyRope(const RopeTable& table, int32_t pos, float* x, int32_t num_heads) {
  const int32_t d = table.head_dim();
  const int32_t half = d / 2;
  const float* c = table.cos_row(pos);
  const float* s = table.sin_row(pos);
  for (int32_t h = 0; h < num_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * d;
    for (int32_t i = 0; i < half; ++i) {
      const float x0 = xh[i];
      const float x1 = xh[i + half];
      xh[i] = x0 * c[i] - x1 * s[i];
      xh[i + half] = x1 * c[i] + x0 * s[i];
    }
  }
}

void ApplyRopeReference(int32_t head_dim, float theta, int32_t pos, float* x, int32_t num_heads) {
  const int32_t half = head_dim / 2;
  for (int32_t h = 0; h < num_heads; ++h) {
    for (int32_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * InvFreq(i, head_dim, theta);
      const float c = static_cast<float>(std::cos(angle));
      const float s = static_cast<float>(std::sin(angle));
      const float x0 = x[h * head_dim + i];
      const float x1 = x[h * head_dim + i + half];
      x[h * head_dim + i] = x0 * c - x1 * s;
      x[h * head_dim + i + half] = x1 * c + x0 * s;
    }
  }
}

}  // namespace kvferry::engine::kernels
