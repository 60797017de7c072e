// GGUF (llama.cpp's model format, versions 2 and 3): parsing a file's bytes, and one file read
// through a read-only mapping.
//
// Layout, little-endian: "GGUF", u32 version, u64 tensor count, u64 key-value count; the
// key-value pairs (string key, u32 value type, value); the tensor infos (string name, u32
// n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); zero padding up to a multiple of
// `general.alignment` (a u32 key, 32 when absent); the data section. A string is a u64 length
// and that many bytes; an array is a u32 element type, a u64 count and the elements. A tensor's
// offset counts from the start of the data section and is a multiple of the alignment.
// Versions 2 and 3 lay files out alike (3 allowed big-endian files, which kvferry refuses).
//
// Shape order: ggml lists dimensions innermost first (ne[0] is the length of a row).
// TensorView::shape is ne[] reversed, row-major like safetensors and PyTorch, so a weight
// matrix of `rows` rows of `cols` reads {rows, cols} from either format.
//
// Checked (each error names the file, and the key or tensor where there is one;
// docs/formats.md): magic; version 2 or 3; the counts of the header, before anything is
// allocated from them (every key-value pair takes at least 13 bytes and every tensor info 24,
// so a count the file cannot hold is refused at once), and every string length and array count
// likewise against the bytes left; keys non-empty and unique; value types known; bools 0 or 1;
// general.alignment a u32 power of two; tensor names unique, n_dims <= 4, sizes below 2^63,
// known ggml type ids, rows of whole quantization blocks, offsets aligned, data inside the file
// and no two tensors overlapping. Codes: DataLoss for a corrupt file; InvalidArgument for what
// a valid file may hold but this reader does not take (another version, an unknown type id,
// more than 4 dimensions, arrays of arrays).
//
// Thread-safety: GgufFile is immutable after Open; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/gguf_metadata.h"
#include "kvferry/formats/mapped_file.h"
#include "kvferry/formats/tensor.h"
#include "kvferry/formats/tensor_index.h"

namespace kvferry::formats {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
// The largest general.alignment accepted (read or written): files use 32 or 64.
inline constexpr uint32_t kGgufMaxAlignment = uint32_t{1} << 20;
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr std::string_view kGgufAlignmentKey = "general.alignment";

struct GgufContents {
  uint32_t version = 3;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // where the data section starts in the file
  GgufMetadata metadata;
  std::vector<TensorView> tensors;  // in tensor-info order
};

// Parses a whole file's `bytes`; the views point into `bytes`. `source` names the bytes in
// errors and in TensorView::file.
StatusOr<GgufContents> ParseGguf(std::span<const std::byte> bytes, std::string_view source);

class GgufFile {
 public:
  // MappedFile::Open's errors, then ParseGguf's.
  static StatusOr<GgufFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const GgufMetadata& metadata() const { return metadata_; }
  // In tensor-info order.
  const std::vector<TensorView>& tensors() const { return index_.tensors(); }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const { return index_.Find(name); }
  // NotFound naming the tensor and the file when absent.
  StatusOr<const TensorView*> Get(std::string_view name) const { return index_.Get(name); }

 private:
  GgufFile(MappedFile file, GgufContents contents, TensorIndex index)
      : file_(std::move(file)),
        version_(contents.version),
        alignment_(contents.alignment),
        metadata_(std::move(contents.metadata)),
        index_(std::move(index)) {}

  MappedFile file_;  // the views in index_ point into it
  uint32_t version_;
  uint32_t alignment_;
  GgufMetadata metadata_;
  TensorIndex index_;
};

}  // namespace kvferry::formats
