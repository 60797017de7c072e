// TensorView: one tensor of a checkpoint file, as every reader here gives it (safetensors and
// GGUF alike), and reading its values as f32.
//
// The view points into the file's mapping: it is valid while the file object it came from
// (SafetensorsFile, SafetensorsModel, GgufFile) lives, and it never copies tensor data.
// `shape` is row-major, outermost dimension first, as PyTorch and safetensors write it; the
// GGUF reader reverses ggml's ne[] (innermost first) into this order (docs/formats.md).
//
// Thread-safety: a value; the bytes it points at are read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/dtype.h"

namespace kvferry::formats {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major; [] is a scalar
  const std::byte* data = nullptr;
  uint64_t size_bytes = 0;  // TensorBytes(dtype, shape), checked when the file was read
  std::string file;         // the path (or the source name given to a Parse* function)

  std::span<const std::byte> bytes() const { return {data, static_cast<size_t>(size_bytes)}; }
  // Product of the shape (1 for a scalar); the readers have checked that it fits.
  int64_t elements() const;
};

// OK when t.dtype is one of `allowed`; otherwise InvalidArgument naming the tensor, its file,
// its dtype and the allowed ones ("tensor 'w' in 'm.gguf' has dtype Q4_K; expected F32, F16
// or BF16").
Status RequireDType(const TensorView& t, std::initializer_list<DType> allowed);

// Converts an F32, F16 or BF16 tensor into `out` (exactly t.elements() floats; F16 and BF16
// widen exactly). InvalidArgument for any other dtype (RequireDType's message) or a wrong size.
Status ReadAsF32(const TensorView& t, std::span<float> out);

}  // namespace kvferry::formats
