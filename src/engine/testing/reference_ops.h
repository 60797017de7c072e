// The float64 building blocks of the reference model (test-only; reference_model.h), shared by
// its Llama-family part (reference_model.cc) and its MLA part (reference_mla.cc). Plain loops
// in double, no kernel of the engine.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/weights.h"
#include "kvferry/common/status.h"

namespace kvferry::engine {

std::vector<double> ReferenceToDouble(const float* data, int64_t n);
// y[o] = sum over i of w[o][i] * x[i]; w is [out][x.size()] row-major.
std::vector<double> ReferenceLinear(const std::vector<double>& w, const std::vector<double>& x,
                                    int64_t out);
// x / sqrt(mean(x^2) + eps) * weight.
std::vector<double> ReferenceRmsNorm(const std::vector<double>& x,
                                     const std::vector<double>& weight, double eps);
// "Rotate half" RoPE of one head of 2 * inv_freq.size() values at position `pos`.
void ReferenceRope(const std::vector<double>& inv_freq, int32_t pos, double* head);
// InvalidArgument naming `name` unless t has `want` values.
Status ReferenceCheckSize(const std::vector<float>& t, int64_t want, const std::string& name);
// A weight matrix in double, after checking its shape.
StatusOr<std::vector<double>> ReferenceMatrix(const WeightMatrix& m, int64_t rows, int64_t cols,
                                              const std::string& name);

}  // namespace kvferry::engine
