#include "kvferry/formats/gguf.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "formats/byte_cursor.h"

namespace kvferry::formats {

namespace {

using internal::ByteCursor;

// The least a key-value pair (empty key, type, one-byte value) and a tensor info (empty name,
// n_dims 0, type, offset) take: a count above remaining / these cannot be true.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint32_t kMaxGgufType = 12;

std::string Prefix(std::string_view source) { return "GGUF '" + std::string(source) + "'"; }

bool IsKnownValueType(uint32_t id) { return id <= kMaxGgufType; }

// On-disk bytes of one scalar; strings take at least their 8-byte length.
uint64_t MinElementBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    default:  // u64, i64, f64, string
      return 8;
  }
}

template <typename T>
Status ReadInt(ByteCursor& c, GgufValue& v) {
  KVF_ASSIGN_OR_RETURN(const T x, c.Read<T>("an integer"));
  v.ints.push_back(static_cast<int64_t>(x));  // u64: the bits, see GgufValue::ints
  return Status::Ok();
}

template <typename T>
Status ReadFloat(ByteCursor& c, GgufValue& v) {
  KVF_ASSIGN_OR_RETURN(const T x, c.Read<T>("a float"));
  v.floats.push_back(static_cast<double>(x));
  return Status::Ok();
}

// Appends one element of `v.type` to `v`.
Status ReadElement(ByteCursor& c, GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kU8:
      return ReadInt<uint8_t>(c, v);
    case GgufValueType::kI8:
      return ReadInt<int8_t>(c, v);
    case GgufValueType::kU16:
      return ReadInt<uint16_t>(c, v);
    case GgufValueType::kI16:
      return ReadInt<int16_t>(c, v);
    case GgufValueType::kU32:
      return ReadInt<uint32_t>(c, v);
    case GgufValueType::kI32:
      return ReadInt<int32_t>(c, v);
    case GgufValueType::kU64:
      return ReadInt<uint64_t>(c, v);
    case GgufValueType::kI64:
      return ReadInt<int64_t>(c, v);
    case GgufValueType::kF32:
      return ReadFloat<float>(c, v);
    case GgufValueType::kF64:
      return ReadFloat<double>(c, v);
    case GgufValueType::kBool: {
      KVF_ASSIGN_OR_RETURN(const uint8_t b, c.Read<uint8_t>("a bool"));
      if (b > 1) return DataLossError("bool byte " + std::to_string(b) + " is neither 0 nor 1");
      v.ints.push_back(b);
      return Status::Ok();
    }
    case GgufValueType::kString: {
      KVF_ASSIGN_OR_RETURN(std::string s, c.ReadString("a string"));
      v.strings.push_back(std::move(s));
      return Status::Ok();
    }
    case GgufValueType::kArray:
      break;
  }
  return InternalError("ReadElement of an array");
}

StatusOr<GgufValue> ReadArray(ByteCursor& c) {
  KVF_ASSIGN_OR_RETURN(const uint32_t type, c.Read<uint32_t>("an array's element type"));
  KVF_ASSIGN_OR_RETURN(const uint64_t count, c.Read<uint64_t>("an array's length"));
  if (type == static_cast<uint32_t>(GgufValueType::kArray)) {
    return InvalidArgumentError("arrays of arrays are not supported");
  }
  if (!IsKnownValueType(type)) {
    return DataLossError("unknown array element type " + std::to_string(type));
  }
  GgufValue v;
  v.type = static_cast<GgufValueType>(type);
  v.is_array = true;
  if (count > c.remaining() / MinElementBytes(v.type)) {
    return DataLossError("array of " + std::to_string(count) + " " +
                         std::string(GgufValueTypeName(v.type)) + " cannot fit in the " +
                         std::to_string(c.remaining()) + " bytes left");
  }
  if (v.type == GgufValueType::kString) {
    v.strings.reserve(count);
  } else if (IsGgufFloatType(v.type)) {
    v.floats.reserve(count);
  } else {
    v.ints.reserve(count);
  }
  for (uint64_t i = 0; i < count; ++i) KVF_RETURN_IF_ERROR(ReadElement(c, v));
  return v;
}

StatusOr<GgufValue> ReadValue(ByteCursor& c) {
  KVF_ASSIGN_OR_RETURN(const uint32_t type, c.Read<uint32_t>("a value type"));
  if (type == static_cast<uint32_t>(GgufValueType::kArray)) return ReadArray(c);
  if (!IsKnownValueType(type)) return DataLossError("unknown value type " + std::to_string(type));
  GgufValue v;
  v.type = static_cast<GgufValueType>(type);
  KVF_RETURN_IF_ERROR(ReadElement(c, v));
  return v;
}

struct Header {
  uint32_t version;
  uint64_t tensor_count;
  uint64_t kv_count;
};

StatusOr<Header> ReadHeader(ByteCursor& c, std::string_view source) {
  auto magic = c.Read<std::array<char, 4>>("the magic");
  if (!magic.ok() || std::string_view(magic->data(), 4) != "GGUF") {
    return DataLossError(Prefix(source) + ": not a GGUF file (no \"GGUF\" magic)");
  }
  Header h;
  auto version = c.Read<uint32_t>("the version");
  if (!version.ok()) return version.status().WithContext(Prefix(source));
  h.version = *version;
  if (h.version != 2 && h.version != 3) {
    const bool swapped = (h.version & 0xffffu) == 0 && h.version != 0;
    return InvalidArgumentError(Prefix(source) + ": version " + std::to_string(h.version) +
                                " is not supported (2 and 3 are)" +
                                (swapped ? "; a big-endian file?" : ""));
  }
  auto counts = c.Read<std::array<uint64_t, 2>>("the tensor and key-value counts");
  if (!counts.ok()) return counts.status().WithContext(Prefix(source));
  h.tensor_count = (*counts)[0];
  h.kv_count = (*counts)[1];
  const uint64_t left = c.remaining();
  if (h.kv_count > left / kMinKeyValueBytes || h.tensor_count > left / kMinTensorInfoBytes ||
      h.kv_count * kMinKeyValueBytes + h.tensor_count * kMinTensorInfoBytes > left) {
    return DataLossError(Prefix(source) + ": header claims " + std::to_string(h.tensor_count) +
                         " tensors and " + std::to_string(h.kv_count) +
                         " key-value pairs, more than the " + std::to_string(left) +
                         " bytes after it can hold");
  }
  return h;
}

StatusOr<GgufMetadata> ReadMetadata(ByteCursor& c, uint64_t count, std::string_view source) {
  GgufMetadata metadata{std::string(source)};
  for (uint64_t i = 0; i < count; ++i) {
    const std::string where = Prefix(source) + ": key-value pair " + std::to_string(i);
    auto key = c.ReadString("a key");
    if (!key.ok()) return key.status().WithContext(where);
    if (key->empty()) return DataLossError(where + ": empty key");
    auto value = ReadValue(c);
    if (!value.ok()) return value.status().WithContext(Prefix(source) + ": key '" + *key + "'");
    if (!metadata.Add(*key, std::move(*value)).ok()) {
      return DataLossError(Prefix(source) + ": key '" + *key + "' appears twice");
    }
  }
  return metadata;
}

StatusOr<uint32_t> Alignment(const GgufMetadata& metadata, std::string_view source) {
  const GgufValue* v = metadata.Find(kGgufAlignmentKey);
  if (v == nullptr) return kGgufDefaultAlignment;
  if (v->is_array || v->type != GgufValueType::kU32) {
    return DataLossError(Prefix(source) + ": " + std::string(kGgufAlignmentKey) +
                         " must be a u32, found " + v->TypeName());
  }
  const uint64_t a = static_cast<uint64_t>(v->ints[0]);
  if (!std::has_single_bit(a)) {
    return DataLossError(Prefix(source) + ": " + std::string(kGgufAlignmentKey) + " " +
                         std::to_string(a) + " is not a power of two");
  }
  // Writers use 32 (the default) or 64; a huge one would only make a re-write pad the data
  // section by that much (1 GiB from four bytes of metadata).
  if (a > kGgufMaxAlignment) {
    return DataLossError(Prefix(source) + ": " + std::string(kGgufAlignmentKey) + " " +
                         std::to_string(a) + " is larger than " +
                         std::to_string(kGgufMaxAlignment));
  }
  return static_cast<uint32_t>(a);
}

struct TensorInfo {
  TensorView view;  // data not yet set
  uint64_t offset;  // in the data section
};

// One tensor info, checked on its own (placement is checked once the data section is known).
StatusOr<TensorInfo> ReadTensorInfo(ByteCursor& c, uint64_t i, uint32_t alignment,
                                    std::string_view source) {
  TensorInfo info;
  auto name = c.ReadString("a tensor name");
  if (!name.ok())
    return name.status().WithContext(Prefix(source) + ": tensor " + std::to_string(i));
  info.view.name = std::move(*name);
  info.view.file = std::string(source);
  const std::string where = Prefix(source) + ": tensor '" + info.view.name + "'";
  auto n_dims = c.Read<uint32_t>("n_dims");
  if (!n_dims.ok()) return n_dims.status().WithContext(where);
  if (*n_dims > kGgufMaxDims) {
    return InvalidArgumentError(where + ": " + std::to_string(*n_dims) +
                                " dimensions (GGUF has at most 4)");
  }
  std::vector<int64_t> ne;
  for (uint32_t d = 0; d < *n_dims; ++d) {
    auto size = c.Read<uint64_t>("a dimension");
    if (!size.ok()) return size.status().WithContext(where);
    if (*size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DataLossError(where + ": dimension " + std::to_string(*size) + " is above 2^63 - 1");
    }
    ne.push_back(static_cast<int64_t>(*size));
  }
  info.view.shape.assign(ne.rbegin(), ne.rend());  // row-major: outermost first
  auto type = c.Read<uint32_t>("the ggml type");
  if (!type.ok()) return type.status().WithContext(where);
  std::optional<DType> dtype = DTypeFromGgmlType(*type);
  if (!dtype) {
    return InvalidArgumentError(where + ": ggml type id " + std::to_string(*type) +
                                " is not one kvferry knows (removed, or newer than this reader)");
  }
  info.view.dtype = *dtype;
  const int64_t row = ne.empty() ? 1 : ne[0];
  if (row % DTypeBlockElements(*dtype) != 0) {
    return DataLossError(where + ": rows of " + std::to_string(row) + " are not whole " +
                         std::string(DTypeName(*dtype)) + " blocks of " +
                         std::to_string(DTypeBlockElements(*dtype)));
  }
  StatusOr<uint64_t> bytes = TensorBytes(*dtype, info.view.shape);
  if (!bytes.ok()) return DataLossError(where + ": " + std::string(bytes.status().message()));
  info.view.size_bytes = *bytes;
  auto offset = c.Read<uint64_t>("the offset");
  if (!offset.ok()) return offset.status().WithContext(where);
  info.offset = *offset;
  if (info.offset % alignment != 0) {
    return DataLossError(where + ": offset " + std::to_string(info.offset) +
                         " is not a multiple of the alignment " + std::to_string(alignment));
  }
  return info;
}

// Points each tensor into the data section, which it must lie in, and refuses overlaps.
StatusOr<std::vector<TensorView>> Place(std::vector<TensorInfo> infos,
                                        std::span<const std::byte> data, std::string_view source) {
  for (TensorInfo& info : infos) {
    if (info.offset > data.size() || info.view.size_bytes > data.size() - info.offset) {
      return DataLossError(
          Prefix(source) + ": tensor '" + info.view.name + "': bytes [" +
          std::to_string(info.offset) + ", +" + std::to_string(info.view.size_bytes) +
          ") run past the end of the data section (" + std::to_string(data.size()) + " bytes)");
    }
    info.view.data = data.data() + info.offset;
  }
  std::vector<size_t> order(infos.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return infos[a].offset < infos[b].offset; });
  const TensorInfo* previous = nullptr;
  for (size_t i : order) {
    const TensorInfo& info = infos[i];
    if (info.view.size_bytes == 0) continue;  // an empty tensor occupies nothing
    if (previous != nullptr && info.offset < previous->offset + previous->view.size_bytes) {
      return DataLossError(Prefix(source) + ": tensors '" + previous->view.name + "' and '" +
                           info.view.name + "' overlap");
    }
    previous = &info;
  }
  std::vector<TensorView> views;
  views.reserve(infos.size());
  for (TensorInfo& info : infos) views.push_back(std::move(info.view));
  return views;
}

}  // namespace

StatusOr<GgufContents> ParseGguf(std::span<const std::byte> bytes, std::string_view source) {
  ByteCursor c(bytes);
  KVF_ASSIGN_OR_RETURN(const Header header, ReadHeader(c, source));
  GgufContents contents;
  contents.version = header.version;
  KVF_ASSIGN_OR_RETURN(contents.metadata, ReadMetadata(c, header.kv_count, source));
  KVF_ASSIGN_OR_RETURN(contents.alignment, Alignment(contents.metadata, source));
  std::vector<TensorInfo> infos;
  infos.reserve(header.tensor_count);  // bounded by the file size (ReadHeader)
  std::set<std::string_view> names;
  for (uint64_t i = 0; i < header.tensor_count; ++i) {
    KVF_ASSIGN_OR_RETURN(TensorInfo info, ReadTensorInfo(c, i, contents.alignment, source));
    infos.push_back(std::move(info));
  }
  for (const TensorInfo& info : infos) {
    if (!names.insert(info.view.name).second) {
      return DataLossError(Prefix(source) + ": two tensors are named '" + info.view.name + "'");
    }
  }
  const uint64_t a = contents.alignment;
  contents.data_offset = (c.pos() + a - 1) / a * a;
  if (contents.data_offset > bytes.size()) {
    if (!infos.empty()) {
      return DataLossError(Prefix(source) + ": the data section would start at byte " +
                           std::to_string(contents.data_offset) + ", past the end of the file (" +
                           std::to_string(bytes.size()) + " bytes)");
    }
    contents.data_offset = bytes.size();  // no tensors: the padding may be left out
  }
  KVF_ASSIGN_OR_RETURN(contents.tensors,
                       Place(std::move(infos), bytes.subspan(contents.data_offset), source));
  return contents;
}

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  KVF_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  KVF_ASSIGN_OR_RETURN(GgufContents contents, ParseGguf(file.bytes(), path));
  KVF_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::Build(std::move(contents.tensors), path));
  return GgufFile(std::move(file), std::move(contents), std::move(index));
}

}  // namespace kvferry::formats
