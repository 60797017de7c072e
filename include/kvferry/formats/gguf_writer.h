// GgufWriter: builds GGUF files (version 3) that GgufFile, and llama.cpp, read back.
//
// Laid out as ggml's gguf writer does: the key-value pairs in the order added, then
// general.alignment when it is not the default 32; the tensor infos in the order added; the
// data section, each tensor at the next multiple of the alignment with zero padding after it.
// Shapes are given row-major, as TensorView has them, and stored as ggml's ne[] (reversed).
// Tensor names are at most 63 bytes (llama.cpp's limit). Every ggml type can be written, as raw
// bytes: F32, F16 and BF16 are what the engine reads, the others let tests check that they are
// refused. Everything is held in memory: for tests and small checkpoints.
//
// Thread-safety: externally synchronized; const methods may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/dtype.h"
#include "kvferry/formats/gguf_metadata.h"

namespace kvferry::formats {

inline constexpr size_t kGgufMaxTensorNameBytes = 63;

class GgufWriter {
 public:
  // InvalidArgument unless a power of two.
  Status SetAlignment(uint32_t alignment);

  // InvalidArgument for an empty key, general.alignment (SetAlignment writes it), or a value
  // that does not hold what its type says (values of another type, integers outside the type's
  // range, bools other than 0 / 1, a scalar without exactly one element); AlreadyExists for a
  // key added twice.
  Status AddMetadata(std::string key, GgufValue value);

  // InvalidArgument when the name is longer than kGgufMaxTensorNameBytes or added twice, the
  // dtype is not a ggml type, the shape has more than 4 dimensions, is invalid (TensorBytes) or
  // has rows (last dimension) that are not whole blocks, or data is not TensorBytes long.
  Status AddTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                   std::span<const std::byte> data);

  std::vector<std::byte> Bytes() const;
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };

  // Header, key-value pairs and tensor infos, padded to the alignment.
  std::vector<std::byte> HeaderBytes() const;
  template <typename Sink>
  void Emit(const Sink& sink) const;

  uint32_t alignment_ = 32;
  GgufMetadata metadata_{"writer"};
  std::vector<Entry> entries_;
};

}  // namespace kvferry::formats
