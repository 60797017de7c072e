// SafetensorsModel: the tensors of a Hugging Face model in safetensors, from one file or a
// directory of shards, behind one lookup by name.
//
// Open(path) takes
//   - a file: that one file;
//   - a directory with model.safetensors: that file;
//   - a directory with model.safetensors.index.json ({"weight_map": {tensor: shard file}}, as
//     transformers writes it) and its shards, usually model-0000i-of-0000n.safetensors (the
//     weight map decides the names).
// Checked beyond each shard's own checks (SafetensorsFile): the index is a JSON object whose
// weight_map maps names to plain file names in the directory (no '/', not "." or "..": a shard
// may not lie outside it); every tensor of the weight map is in the shard it names; every
// tensor of a shard is in the weight map, under that shard (so no tensor is in two shards);
// shards do not disagree about a __metadata__ key. Codes: NotFound for a missing path or shard,
// DataLoss for an index or shard that is corrupt or contradicts the other.
//
// Thread-safety: immutable after Open; const methods may be called from any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/safetensors.h"
#include "kvferry/formats/tensor.h"
#include "kvferry/formats/tensor_index.h"

namespace kvferry::formats {

inline constexpr std::string_view kSafetensorsSingleFile = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexFile = "model.safetensors.index.json";

class SafetensorsModel {
 public:
  static StatusOr<SafetensorsModel> Open(const std::string& path);

  // In the order of their file names.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Every shard's __metadata__ together.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // All tensors, shard by shard, each shard's in data-buffer order.
  const std::vector<TensorView>& tensors() const { return index_.tensors(); }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const { return index_.Find(name); }
  // NotFound naming the tensor and the model path when absent.
  StatusOr<const TensorView*> Get(std::string_view name) const { return index_.Get(name); }

 private:
  SafetensorsModel(std::vector<SafetensorsFile> shards, std::map<std::string, std::string> meta,
                   TensorIndex index)
      : shards_(std::move(shards)), metadata_(std::move(meta)), index_(std::move(index)) {}

  std::vector<SafetensorsFile> shards_;  // own the mappings the views point into
  std::map<std::string, std::string> metadata_;
  TensorIndex index_;
};

}  // namespace kvferry::formats
