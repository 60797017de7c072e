#include "kvferry/formats/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/file_write.h"
#include "kvferry/formats/safetensors_model.h"

namespace kvferry::formats {

namespace {

using Json = nlohmann::json;

Status WriteBytes(const std::string& path, std::span<const std::byte> bytes) {
  return internal::WriteFileReplacing(path, [&](const internal::ByteSink& sink) { sink(bytes); });
}

std::string ShardName(int i, int n) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, n);
  return name;
}

}  // namespace

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

Status SafetensorsWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                                    std::span<const std::byte> data) {
  const std::string what = "safetensors tensor '" + name + "': ";
  if (name == "__metadata__") return InvalidArgumentError(what + "the name is reserved");
  for (const Entry& e : entries_) {
    if (e.name == name) return InvalidArgumentError(what + "added twice");
  }
  if (!IsSafetensorsDType(dtype)) {
    return InvalidArgumentError(what + "safetensors has no dtype " + std::string(DTypeName(dtype)));
  }
  StatusOr<uint64_t> bytes = TensorBytes(dtype, shape);
  if (!bytes.ok()) return InvalidArgumentError(what + std::string(bytes.status().message()));
  if (data.size() != *bytes) {
    return InvalidArgumentError(what + std::to_string(data.size()) +
                                " bytes of data, shape takes " + std::to_string(*bytes));
  }
  entries_.push_back({std::move(name), dtype, std::move(shape), {data.begin(), data.end()}});
  return Status::Ok();
}

std::vector<std::byte> SafetensorsWriter::FileBytes(size_t begin, size_t end) const {
  Json header = Json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    const Entry& e = entries_[i];
    header[e.name] = {{"dtype", DTypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t n = text.size();
  std::vector<std::byte> out(8 + text.size());
  std::memcpy(out.data(), &n, 8);  // little-endian host (safetensors.cc asserts it)
  std::memcpy(out.data() + 8, text.data(), text.size());
  for (size_t i = begin; i < end; ++i) {
    out.insert(out.end(), entries_[i].data.begin(), entries_[i].data.end());
  }
  return out;
}

std::vector<std::byte> SafetensorsWriter::Bytes() const { return FileBytes(0, entries_.size()); }

Status SafetensorsWriter::Write(const std::string& path) const { return WriteBytes(path, Bytes()); }

Status SafetensorsWriter::WriteDirectory(const std::string& dir, int num_shards) const {
  if (num_shards < 1 || static_cast<size_t>(num_shards) > std::max<size_t>(entries_.size(), 1)) {
    return InvalidArgumentError("cannot split " + std::to_string(entries_.size()) +
                                " tensors into " + std::to_string(num_shards) + " shards");
  }
  const std::filesystem::path base(dir);
  if (num_shards == 1) return Write((base / kSafetensorsSingleFile).string());
  Json weight_map = Json::object();
  uint64_t total = 0;
  const size_t n = entries_.size();
  for (int s = 0; s < num_shards; ++s) {
    const size_t begin = n * s / num_shards, end = n * (s + 1) / num_shards;
    const std::string name = ShardName(s, num_shards);
    for (size_t i = begin; i < end; ++i) {
      weight_map[entries_[i].name] = name;
      total += entries_[i].data.size();
    }
    KVF_RETURN_IF_ERROR(WriteBytes((base / name).string(), FileBytes(begin, end)));
  }
  const Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  return WriteBytes((base / kSafetensorsIndexFile).string(),
                    std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace kvferry::formats
