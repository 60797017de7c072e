#include "kvferry/formats/safetensors_model.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "kvferry/formats/mapped_file.h"

namespace kvferry::formats {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using WeightMap = std::map<std::string, std::string>;  // tensor -> shard file name

// A shard must be a file of the model directory itself.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
}

StatusOr<WeightMap> ReadWeightMap(const std::string& index_path) {
  KVF_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(index_path));
  const std::span<const std::byte> bytes = file.bytes();
  const Json index = Json::parse(reinterpret_cast<const char*>(bytes.data()),
                                 reinterpret_cast<const char*>(bytes.data() + bytes.size()),
                                 /*cb=*/nullptr, /*allow_exceptions=*/false);
  auto err = [&](const std::string& problem) {
    return DataLossError("safetensors index '" + index_path + "': " + problem);
  };
  if (index.is_discarded() || !index.is_object()) return err("not a JSON object");
  auto it = index.find("weight_map");
  if (it == index.end() || !it->is_object()) return err("no weight_map object");
  WeightMap map;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string()) return err("weight_map '" + tensor + "' is not a file name");
    const std::string name = shard.get<std::string>();
    if (!IsPlainFileName(name)) {
      return err("tensor '" + tensor + "' names shard '" + name +
                 "', which is not a file of the model directory");
    }
    map.emplace(tensor, name);
  }
  return map;
}

// Each tensor of each shard is where the weight map says, and each weight-map entry is there.
Status CheckAgainstWeightMap(const std::vector<SafetensorsFile>& shards,
                             const std::vector<std::string>& shard_names, const WeightMap& map,
                             const std::string& index_path) {
  for (size_t s = 0; s < shards.size(); ++s) {
    for (const TensorView& t : shards[s].tensors()) {
      auto it = map.find(t.name);
      if (it == map.end()) {
        return DataLossError("shard '" + shards[s].path() + "' holds tensor '" + t.name +
                             "', which '" + index_path + "' does not list");
      }
      if (it->second != shard_names[s]) {
        return DataLossError("tensor '" + t.name + "' is in shard '" + shards[s].path() +
                             "', but '" + index_path + "' places it in '" + it->second + "'");
      }
    }
  }
  for (const auto& [tensor, shard] : map) {
    const size_t s =
        std::lower_bound(shard_names.begin(), shard_names.end(), shard) - shard_names.begin();
    if (shards[s].Find(tensor) == nullptr) {
      return DataLossError("'" + index_path + "' places tensor '" + tensor + "' in '" +
                           shards[s].path() + "', which does not hold it");
    }
  }
  return Status::Ok();
}

StatusOr<std::map<std::string, std::string>> MergeMetadata(
    const std::vector<SafetensorsFile>& shards) {
  std::map<std::string, std::string> merged;
  for (const SafetensorsFile& shard : shards) {
    for (const auto& [key, value] : shard.metadata()) {
      auto [it, inserted] = merged.emplace(key, value);
      if (!inserted && it->second != value) {
        return DataLossError("shard '" + shard.path() + "' has __metadata__ '" + key +
                             "' different from an earlier shard's");
      }
    }
  }
  return merged;
}

StatusOr<std::vector<SafetensorsFile>> OpenIndexedShards(const fs::path& dir) {
  const std::string index_path = (dir / kSafetensorsIndexFile).string();
  KVF_ASSIGN_OR_RETURN(const WeightMap map, ReadWeightMap(index_path));
  std::set<std::string> names;
  for (const auto& [tensor, shard] : map) names.insert(shard);
  const std::vector<std::string> shard_names(names.begin(), names.end());
  std::vector<SafetensorsFile> shards;
  for (const std::string& name : shard_names) {
    KVF_ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::Open((dir / name).string()));
    shards.push_back(std::move(shard));
  }
  KVF_RETURN_IF_ERROR(CheckAgainstWeightMap(shards, shard_names, map, index_path));
  return shards;
}

// The files `path` stands for: itself, or a model directory's single file or indexed shards.
StatusOr<std::vector<SafetensorsFile>> OpenShards(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return NotFoundError("no model at '" + path + "'");
  fs::path single = path;
  if (fs::is_directory(status)) {
    single = fs::path(path) / kSafetensorsSingleFile;
    if (!fs::exists(single, ec)) {
      if (fs::exists(fs::path(path) / kSafetensorsIndexFile, ec)) return OpenIndexedShards(path);
      return NotFoundError("model directory '" + path + "' has neither " +
                           std::string(kSafetensorsSingleFile) + " nor " +
                           std::string(kSafetensorsIndexFile));
    }
  }
  KVF_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(single.string()));
  std::vector<SafetensorsFile> shards;
  shards.push_back(std::move(file));
  return shards;
}

}  // namespace

StatusOr<SafetensorsModel> SafetensorsModel::Open(const std::string& path) {
  KVF_ASSIGN_OR_RETURN(std::vector<SafetensorsFile> shards, OpenShards(path));
  KVF_ASSIGN_OR_RETURN(auto metadata, MergeMetadata(shards));
  std::vector<TensorView> all;
  for (const SafetensorsFile& shard : shards) {
    all.insert(all.end(), shard.tensors().begin(), shard.tensors().end());
  }
  KVF_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::Build(std::move(all), path));
  return SafetensorsModel(std::move(shards), std::move(metadata), std::move(index));
}

}  // namespace kvferry::formats
