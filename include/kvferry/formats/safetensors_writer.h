// SafetensorsWriter: builds safetensors files, one file or a model directory of shards with
// model.safetensors.index.json, that SafetensorsFile / SafetensorsModel read back.
//
// Tensors are copied in when added and written in that order, back to back; each header is
// padded with spaces to a multiple of 8 bytes, as the safetensors library does, so that the data
// buffer starts 8-aligned in a mapping. Every safetensors dtype can be written (as raw bytes):
// F32, F16 and BF16 are what the engine reads, the others let tests check that they are refused.
// Everything is held in memory: for tests and small checkpoints.
//
// Thread-safety: externally synchronized; const methods may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/dtype.h"

namespace kvferry::formats {

class SafetensorsWriter {
 public:
  // An entry of "__metadata__"; replaces an earlier value of `key`.
  void SetMetadata(std::string key, std::string value);

  // InvalidArgument when the name is "__metadata__" or already added, the dtype is not a
  // safetensors one, the shape is invalid (TensorBytes), or data is not TensorBytes long.
  Status AddTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                   std::span<const std::byte> data);

  // One file holding every tensor.
  std::vector<std::byte> Bytes() const;
  Status Write(const std::string& path) const;

  // Into the existing directory `dir`: with num_shards == 1, model.safetensors; with more,
  // model-0000i-of-0000n.safetensors (the tensors split in order into runs of near-equal
  // count, each shard with the metadata) and model.safetensors.index.json. InvalidArgument when
  // num_shards is below 1 or above the number of tensors (no shard may be empty).
  Status WriteDirectory(const std::string& dir, int num_shards) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };

  // The file of entries_[begin, end).
  std::vector<std::byte> FileBytes(size_t begin, size_t end) const;

  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
};

}  // namespace kvferry::formats
