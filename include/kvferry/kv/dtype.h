// Storage dtypes of the KV cache: conversions between f32 and f16 / bf16, one value at a time
// (common/half.h, re-exported here under kv's names: round to nearest even, portable, identical
// on every machine) or a span at a time.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvferry/common/half.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::kv {

using ::kvferry::BF16ToF32;
using ::kvferry::F16ToF32;
using ::kvferry::F32ToBF16;
using ::kvferry::F32ToF16;

// Stores `src` as `dtype` into `dst` (src.size() * DTypeBytes(dtype) bytes).
void StoreAs(DType dtype, std::span<const float> src, std::byte* dst);
// Loads dst.size() values of `dtype` from `src` into f32.
void LoadFrom(DType dtype, const std::byte* src, std::span<float> dst);

}  // namespace kvferry::kv
