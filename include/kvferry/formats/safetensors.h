// safetensors (Hugging Face's checkpoint format): parsing one file's bytes, and one file read
// through a read-only mapping.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON header (an object, maybe
// padded with spaces), then the data buffer. The header maps each tensor name to
//   {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}
// (offsets into the data buffer, end exclusive) and may hold "__metadata__", a map of strings.
//
// Checked (each error names the file, and the tensor where there is one; docs/formats.md):
// the file holds the 8 length bytes; N is at most kMaxSafetensorsHeaderBytes and inside the
// file; the header is one JSON object, without duplicate top-level keys, whose __metadata__
// values are strings; every tensor has a known dtype, a shape of non-negative sizes whose
// element and byte counts fit in 63 bits, and two offsets with begin <= end inside the data
// buffer, end - begin == TensorBytes(dtype, shape); and, as the format requires, the tensors
// cover the data buffer exactly: no two overlap, no byte lies between or after them.
// Codes: DataLoss for a corrupt file, InvalidArgument for a dtype this reader does not know.
//
// Thread-safety: SafetensorsFile is immutable after Open; const methods may be called from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/mapped_file.h"
#include "kvferry/formats/tensor.h"
#include "kvferry/formats/tensor_index.h"

namespace kvferry::formats {

// Headers above this are refused as corrupt (the safetensors library's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsContents {
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent
  std::vector<TensorView> tensors;              // in data-buffer order
};

// Parses a whole file's `bytes`; the views point into `bytes`. `source` names the bytes in
// errors and in TensorView::file.
StatusOr<SafetensorsContents> ParseSafetensors(std::span<const std::byte> bytes,
                                               std::string_view source);

class SafetensorsFile {
 public:
  // MappedFile::Open's errors, then ParseSafetensors's.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // In data-buffer order.
  const std::vector<TensorView>& tensors() const { return index_.tensors(); }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const { return index_.Find(name); }
  // NotFound naming the tensor and the file when absent.
  StatusOr<const TensorView*> Get(std::string_view name) const { return index_.Get(name); }

 private:
  SafetensorsFile(MappedFile file, std::map<std::string, std::string> metadata, TensorIndex index)
      : file_(std::move(file)), metadata_(std::move(metadata)), index_(std::move(index)) {}

  MappedFile file_;  // the views in index_ point into it
  std::map<std::string, std::string> metadata_;
  TensorIndex index_;
};

}  // namespace kvferry::formats
