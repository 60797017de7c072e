#include "kvferry/formats/gguf_writer.h"

#include <bit>
#include <cstring>
#include <limits>

#include "formats/file_write.h"
#include "kvferry/formats/gguf.h"

namespace kvferry::formats {

namespace {

// The range of an integer type; u64 and i64 take any int64_t (u64 as its bits).
std::pair<int64_t, int64_t> IntRange(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return {0, 0xff};
    case GgufValueType::kI8:
      return {-0x80, 0x7f};
    case GgufValueType::kU16:
      return {0, 0xffff};
    case GgufValueType::kI16:
      return {-0x8000, 0x7fff};
    case GgufValueType::kU32:
      return {0, 0xffffffffll};
    case GgufValueType::kI32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case GgufValueType::kBool:
      return {0, 1};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// Empty when `v` holds what its type says; otherwise the problem.
std::string ValueProblem(const GgufValue& v) {
  if (v.type == GgufValueType::kArray || static_cast<uint32_t>(v.type) > 12) {
    return "element type must be a scalar type";
  }
  const bool is_string = v.type == GgufValueType::kString;
  const bool is_float = IsGgufFloatType(v.type);
  const bool is_int = !is_string && !is_float;  // integers and bool
  if ((!is_int && !v.ints.empty()) || (!is_float && !v.floats.empty()) ||
      (!is_string && !v.strings.empty())) {
    return "holds values of another type than " + v.TypeName();
  }
  if (!v.is_array && v.size() != 1) return "a scalar must hold exactly one value";
  const auto [lo, hi] = IntRange(v.type);
  for (int64_t x : v.ints) {
    if (x < lo || x > hi) return std::to_string(x) + " is outside " + v.TypeName();
  }
  return "";
}

class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));  // little-endian host (gguf.cc)
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  void PadTo(uint64_t alignment) {
    out_.resize((out_.size() + alignment - 1) / alignment * alignment);
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

void PutElement(ByteWriter& w, const GgufValue& v, size_t i) {
  switch (v.type) {
    case GgufValueType::kU8:
    case GgufValueType::kBool:
      return w.Put(static_cast<uint8_t>(v.ints[i]));
    case GgufValueType::kI8:
      return w.Put(static_cast<int8_t>(v.ints[i]));
    case GgufValueType::kU16:
      return w.Put(static_cast<uint16_t>(v.ints[i]));
    case GgufValueType::kI16:
      return w.Put(static_cast<int16_t>(v.ints[i]));
    case GgufValueType::kU32:
      return w.Put(static_cast<uint32_t>(v.ints[i]));
    case GgufValueType::kI32:
      return w.Put(static_cast<int32_t>(v.ints[i]));
    case GgufValueType::kU64:
      return w.Put(static_cast<uint64_t>(v.ints[i]));
    case GgufValueType::kI64:
      return w.Put(v.ints[i]);
    case GgufValueType::kF32:
      return w.Put(static_cast<float>(v.floats[i]));
    case GgufValueType::kF64:
      return w.Put(v.floats[i]);
    case GgufValueType::kString:
      return w.PutString(v.strings[i]);
    case GgufValueType::kArray:
      return;  // refused by AddMetadata
  }
}

void PutValue(ByteWriter& w, const GgufValue& v) {
  if (v.is_array) {
    w.Put(static_cast<uint32_t>(GgufValueType::kArray));
    w.Put(static_cast<uint32_t>(v.type));
    w.Put<uint64_t>(v.size());
  } else {
    w.Put(static_cast<uint32_t>(v.type));
  }
  for (size_t i = 0; i < v.size(); ++i) PutElement(w, v, i);
}

}  // namespace

Status GgufWriter::SetAlignment(uint32_t alignment) {
  if (!std::has_single_bit(alignment)) {
    return InvalidArgumentError("GGUF alignment " + std::to_string(alignment) +
                                " is not a power of two");
  }
  if (alignment > kGgufMaxAlignment) {
    return InvalidArgumentError("GGUF alignment " + std::to_string(alignment) + " is larger than " +
                                std::to_string(kGgufMaxAlignment));
  }
  alignment_ = alignment;
  return Status::Ok();
}

Status GgufWriter::AddMetadata(std::string key, GgufValue value) {
  if (key.empty()) return InvalidArgumentError("GGUF metadata key is empty");
  if (key == kGgufAlignmentKey) {
    return InvalidArgumentError("GGUF key " + key + " is written by SetAlignment");
  }
  const std::string problem = ValueProblem(value);
  if (!problem.empty()) return InvalidArgumentError("GGUF key '" + key + "': " + problem);
  return metadata_.Add(std::move(key), std::move(value));
}

Status GgufWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                             std::span<const std::byte> data) {
  const std::string what = "GGUF tensor '" + name + "': ";
  if (name.size() > kGgufMaxTensorNameBytes) {
    return InvalidArgumentError(what + "name longer than " +
                                std::to_string(kGgufMaxTensorNameBytes) + " bytes");
  }
  for (const Entry& e : entries_) {
    if (e.name == name) return InvalidArgumentError(what + "added twice");
  }
  if (!GgmlTypeOf(dtype)) {
    return InvalidArgumentError(what + "GGUF has no type " + std::string(DTypeName(dtype)));
  }
  if (shape.size() > kGgufMaxDims) return InvalidArgumentError(what + "more than 4 dimensions");
  const int64_t row = shape.empty() ? 1 : shape.back();
  if (row % DTypeBlockElements(dtype) != 0) {
    return InvalidArgumentError(what + "rows of " + std::to_string(row) + " are not whole " +
                                std::string(DTypeName(dtype)) + " blocks");
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

std::vector<std::byte> GgufWriter::HeaderBytes() const {
  const bool write_alignment = alignment_ != kGgufDefaultAlignment;
  ByteWriter w;
  w.Put<uint32_t>(0x46554747u);  // "GGUF" read as a little-endian u32
  w.Put<uint32_t>(3);
  w.Put<uint64_t>(entries_.size());
  w.Put<uint64_t>(metadata_.entries().size() + (write_alignment ? 1 : 0));
  for (const auto& [key, value] : metadata_.entries()) {
    w.PutString(key);
    PutValue(w, value);
  }
  if (write_alignment) {
    w.PutString(std::string(kGgufAlignmentKey));
    PutValue(w, GgufValue::Int(GgufValueType::kU32, alignment_));
  }
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    w.PutString(e.name);
    w.Put<uint32_t>(e.shape.size());
    for (auto d = e.shape.rbegin(); d != e.shape.rend(); ++d) w.Put<uint64_t>(*d);  // ne[]
    w.Put<uint32_t>(*GgmlTypeOf(e.dtype));
    w.Put<uint64_t>(offset);
    offset += (e.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  w.PadTo(alignment_);
  return w.Take();
}

template <typename Sink>
void GgufWriter::Emit(const Sink& sink) const {
  sink(std::span<const std::byte>(HeaderBytes()));
  const std::vector<std::byte> zeros(alignment_);
  for (const Entry& e : entries_) {
    sink(std::span<const std::byte>(e.data));
    const size_t pad = (alignment_ - e.data.size() % alignment_) % alignment_;
    sink(std::span<const std::byte>(zeros.data(), pad));
  }
}

std::vector<std::byte> GgufWriter::Bytes() const {
  std::vector<std::byte> out;
  Emit([&out](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); });
  return out;
}

Status GgufWriter::Write(const std::string& path) const {
  return internal::WriteFileReplacing(path, [this](const internal::ByteSink& sink) { Emit(sink); });
}

}  // namespace kvferry::formats
