// The GGUF block-quantized types the engine computes (internal): which they are, and each one's
// row quantizer and decoder, so the loader, the checkpoint writers and the CLI share one list
// (the kernels' own dispatch is quant_matmul.cc's).
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kvferry/formats/dtype.h"

namespace kvferry::engine::kernels {

// Q8_0, Q4_0, Q5_0, Q4_1, Q5_1: 32-value blocks (quant_q8_0.h, quant_q4_q5.h); Q4_K, Q5_K, Q6_K:
// 256-value super-blocks (quant_k.h).
std::span<const formats::DType> ComputedQuantTypes();
bool IsComputedQuantType(formats::DType dtype);

// The computed type a lower-case name spells ("q8_0", "q4_1", ...), as the CLI takes it.
std::optional<formats::DType> ComputedQuantTypeFromName(std::string_view name);

// n values of one row (a multiple of the type's block) as blocks of `dtype` (a computed type),
// written to out[0, n / block * DTypeBlockBytes(dtype)); ggml's reference quantizer for the type.
void QuantizeRow(formats::DType dtype, const float* x, int64_t n, std::byte* out);

// The byte offsets, within a block of `dtype` (a computed type), of its F16 scales (d, and the
// minimum's scale where the type has one).
std::span<const int> ScaleOffsets(formats::DType dtype);

// The n values of blocks of `dtype` (a computed type) into out[0, n).
void DequantizeRow(formats::DType dtype, const std::byte* blocks, int64_t n, float* out);

}  // namespace kvferry::engine::kernels
