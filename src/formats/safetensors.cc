#include "kvferry/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

namespace kvferry::formats {

static_assert(std::endian::native == std::endian::little,
              "the readers take file bytes as host integers; safetensors is little-endian");

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

class ErrorPrefix {
 public:
  explicit ErrorPrefix(std::string_view source) : file_("safetensors '" + std::string(source)) {}
  Status File(const std::string& problem) const { return DataLossError(file_ + "': " + problem); }
  Status Tensor(const std::string& name, const std::string& problem) const {
    return DataLossError(TensorText(name, problem));
  }
  std::string TensorText(const std::string& name, const std::string& problem) const {
    return file_ + "': tensor '" + name + "': " + problem;
  }

 private:
  std::string file_;
};

StatusOr<uint64_t> HeaderLength(std::span<const std::byte> bytes, const ErrorPrefix& err) {
  if (bytes.size() < 8) {
    return err.File("only " + std::to_string(bytes.size()) +
                    " bytes, shorter than the 8-byte header length");
  }
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxSafetensorsHeaderBytes) {
    return err.File("header length " + std::to_string(n) + " is over the limit of " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > bytes.size() - 8) {
    return err.File("header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(bytes.size()) + " bytes)");
  }
  return n;
}

// The header as JSON. Duplicate top-level keys are refused: a JSON parser keeps one of them,
// and which one would decide which bytes a name stands for.
StatusOr<Json> ParseHeader(std::string_view text, const ErrorPrefix& err) {
  if (text.empty() || text.front() != '{') return err.File("header is not a JSON object");
  std::set<std::string> keys;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header = Json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return err.File("header is not a JSON object");
  }
  if (!duplicate.empty()) return err.File("header names '" + duplicate + "' twice");
  return header;
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& header,
                                                           const ErrorPrefix& err) {
  std::map<std::string, std::string> metadata;
  auto it = header.find(kMetadataKey);
  if (it == header.end()) return metadata;
  if (!it->is_object()) return err.File("__metadata__ is not an object");
  for (const auto& [key, value] : it->items()) {
    if (!value.is_string()) return err.File("__metadata__ '" + key + "' is not a string");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// A JSON integer in [0, 2^63).
bool AsSize(const Json& j, int64_t* out) {
  if (!j.is_number_integer()) return false;
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  *out = j.get<int64_t>();
  return *out >= 0;
}

StatusOr<std::vector<int64_t>> ParseSizes(const Json& entry, const char* field,
                                          const std::string& name, const ErrorPrefix& err) {
  auto it = entry.find(field);
  if (it == entry.end()) return err.Tensor(name, std::string("no ") + field);
  if (!it->is_array()) return err.Tensor(name, std::string(field) + " is not an array");
  std::vector<int64_t> sizes;
  for (const Json& v : *it) {
    int64_t s;
    if (!AsSize(v, &s)) {
      return err.Tensor(
          name, std::string(field) + " holds " + v.dump() + ", not an integer in [0, 2^63)");
    }
    sizes.push_back(s);
  }
  return sizes;
}

StatusOr<DType> ParseDType(const Json& entry, const std::string& name, const ErrorPrefix& err) {
  auto it = entry.find("dtype");
  if (it == entry.end() || !it->is_string()) return err.Tensor(name, "no dtype string");
  const std::string text = it->get<std::string>();
  std::optional<DType> dtype = DTypeFromSafetensorsName(text);
  if (!dtype) {
    return InvalidArgumentError(err.TensorText(name, "unknown dtype '" + text + "'"));
  }
  return *dtype;
}

// One tensor entry, pointing into `data` (the data buffer).
StatusOr<TensorView> ParseTensor(const std::string& name, const Json& entry,
                                 std::span<const std::byte> data, std::string_view source,
                                 const ErrorPrefix& err) {
  if (!entry.is_object()) return err.Tensor(name, "entry is not an object");
  TensorView t;
  t.name = name;
  t.file = std::string(source);
  KVF_ASSIGN_OR_RETURN(t.dtype, ParseDType(entry, name, err));
  KVF_ASSIGN_OR_RETURN(t.shape, ParseSizes(entry, "shape", name, err));
  KVF_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ParseSizes(entry, "data_offsets", name, err));
  if (offsets.size() != 2) return err.Tensor(name, "data_offsets is not [begin, end]");
  const uint64_t begin = offsets[0], end = offsets[1];
  if (end < begin) {
    return err.Tensor(name, "data_offsets end " + std::to_string(end) + " is before begin " +
                                std::to_string(begin));
  }
  if (end > data.size()) {
    return err.Tensor(name, "data_offsets end " + std::to_string(end) +
                                " is past the data buffer (" + std::to_string(data.size()) +
                                " bytes)");
  }
  StatusOr<uint64_t> want = TensorBytes(t.dtype, t.shape);
  if (!want.ok()) return err.Tensor(name, std::string(want.status().message()));
  if (end - begin != *want) {
    return err.Tensor(name, "holds " + std::to_string(end - begin) + " bytes, but its shape of " +
                                std::string(DTypeName(t.dtype)) + " takes " +
                                std::to_string(*want));
  }
  t.data = data.data() + begin;
  t.size_bytes = end - begin;
  return t;
}

// The format forbids holes and overlaps (a file must not hide other content between tensors):
// sorted by offset, each tensor starts where the previous one ended and the last one ends the
// file.
Status CheckCoverage(const std::vector<TensorView>& sorted, std::span<const std::byte> data,
                     const ErrorPrefix& err) {
  uint64_t covered = 0;
  const TensorView* previous = nullptr;
  for (const TensorView& t : sorted) {
    const uint64_t begin = static_cast<uint64_t>(t.data - data.data());
    if (begin < covered) {
      return err.Tensor(t.name, "overlaps tensor '" + previous->name + "'");
    }
    if (begin > covered) {
      return err.File("data bytes [" + std::to_string(covered) + ", " + std::to_string(begin) +
                      ") belong to no tensor");
    }
    covered = begin + t.size_bytes;
    previous = &t;
  }
  if (covered != data.size()) {
    return err.File("data bytes [" + std::to_string(covered) + ", " + std::to_string(data.size()) +
                    ") belong to no tensor");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SafetensorsContents> ParseSafetensors(std::span<const std::byte> bytes,
                                               std::string_view source) {
  const ErrorPrefix err(source);
  KVF_ASSIGN_OR_RETURN(const uint64_t header_len, HeaderLength(bytes, err));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  KVF_ASSIGN_OR_RETURN(const Json header, ParseHeader(text, err));
  SafetensorsContents contents;
  KVF_ASSIGN_OR_RETURN(contents.metadata, ParseMetadata(header, err));
  const std::span<const std::byte> data = bytes.subspan(8 + header_len);
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) continue;
    KVF_ASSIGN_OR_RETURN(TensorView t, ParseTensor(name, entry, data, source, err));
    contents.tensors.push_back(std::move(t));
  }
  // By offset; empty tensors sharing an offset by name, so that the order is the file's alone.
  std::sort(contents.tensors.begin(), contents.tensors.end(),
            [](const TensorView& a, const TensorView& b) {
              return std::tie(a.data, a.size_bytes, a.name) <
                     std::tie(b.data, b.size_bytes, b.name);
            });
  KVF_RETURN_IF_ERROR(CheckCoverage(contents.tensors, data, err));
  return contents;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  KVF_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  KVF_ASSIGN_OR_RETURN(SafetensorsContents contents, ParseSafetensors(file.bytes(), path));
  KVF_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::Build(std::move(contents.tensors), path));
  return SafetensorsFile(std::move(file), std::move(contents.metadata), std::move(index));
}

}  // namespace kvferry::formats
