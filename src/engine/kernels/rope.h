// Rotary position embedding (internal), "rotate half" convention (as Llama checkpoints):
// for i < d/2, (x[i], x[i + d/2]) rotates by angle pos * theta^(-2i/d) / factor[i] (the
// frequency factors of the model's rope scaling, 1 without).
// Determinism: the cos/sin table is a function of (position, i, theta, d, factor[i]) only,
// computed once in double precision and rounded to float; each element then takes two products
// and one sum.
// Thread-safety: RopeTable is immutable after construction; ApplyRope is a pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace kvferry::engine::kernels {

class RopeTable {
 public:
  // `factors`: head_dim / 2 divisors, or empty for none.
  RopeTable(int32_t head_dim, int32_t max_position, float theta,
            const std::vector<float>& factors = {});
  int32_t head_dim() const { return head_dim_; }
  int32_t max_position() const { return max_position_; }
  const float* cos_row(int32_t pos) const { return cos_.data() + int64_t{pos} * (head_dim_ / 2); }
  const float* sin_row(int32_t pos) const { return sin_.data() + int64_t{pos} * (head_dim_ / 2); }

 private:
  int32_t head_dim_;
  int32_t max_position_;
  std::vector<float> cos_;
  std::vector<float> sin_;
};

// Rotates `num_heads` heads of head_dim floats each, stored contiguously at `x`, for position
// `pos` (< table.max_position()).
void ApplyRope(const RopeTable& table, int32_t pos, float* x, int32_t num_heads);
void ApplyRopeReference(int32_t head_dim, float theta, int32_t pos, float* x, int32_t num_heads);

}  // namespace kvferry::engine::kernels
