#include "kvferry/formats/gguf_metadata.h"

#include <cassert>
#include <limits>

namespace kvferry::formats {

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "unknown";
}

bool IsGgufIntegerType(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool IsGgufFloatType(GgufValueType type) {
  return type == GgufValueType::kF32 || type == GgufValueType::kF64;
}

// ---- GgufValue ----

std::string GgufValue::TypeName() const {
  const std::string name(GgufValueTypeName(type));
  return is_array ? "array of " + name : name;
}

size_t GgufValue::size() const {
  if (type == GgufValueType::kString) return strings.size();
  if (IsGgufFloatType(type)) return floats.size();
  return ints.size();
}

GgufValue GgufValue::Int(GgufValueType type, int64_t value) {
  return IntArray(type, {value}).AsScalar();
}
GgufValue GgufValue::Float(GgufValueType type, double value) {
  return FloatArray(type, {value}).AsScalar();
}
GgufValue GgufValue::Bool(bool value) { return BoolArray({value}).AsScalar(); }
GgufValue GgufValue::String(std::string value) {
  return StringArray({std::move(value)}).AsScalar();
}

GgufValue GgufValue::IntArray(GgufValueType type, std::vector<int64_t> values) {
  assert(IsGgufIntegerType(type));
  GgufValue v;
  v.type = type;
  v.is_array = true;
  v.ints = std::move(values);
  return v;
}

GgufValue GgufValue::FloatArray(GgufValueType type, std::vector<double> values) {
  assert(IsGgufFloatType(type));
  GgufValue v;
  v.type = type;
  v.is_array = true;
  v.floats = std::move(values);
  if (type == GgufValueType::kF32) {
    for (double& x : v.floats) x = static_cast<float>(x);  // what a file can hold
  }
  return v;
}

GgufValue GgufValue::BoolArray(const std::vector<bool>& values) {
  GgufValue v;
  v.type = GgufValueType::kBool;
  v.is_array = true;
  v.ints.assign(values.begin(), values.end());
  return v;
}

GgufValue GgufValue::StringArray(std::vector<std::string> values) {
  GgufValue v;
  v.type = GgufValueType::kString;
  v.is_array = true;
  v.strings = std::move(values);
  return v;
}

GgufValue GgufValue::AsScalar() && {
  is_array = false;
  return std::move(*this);
}

// ---- GgufMetadata ----

Status GgufMetadata::Add(std::string key, GgufValue value) {
  if (!by_key_.emplace(key, entries_.size()).second) {
    return AlreadyExistsError("GGUF '" + source_ + "': key '" + key + "' twice");
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return Status::Ok();
}

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &entries_[it->second].second;
}

StatusOr<const GgufValue*> GgufMetadata::Typed(std::string_view key, bool array,
                                               bool (*accept)(GgufValueType),
                                               std::string_view expected) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return NotFoundError("GGUF '" + source_ + "' has no key '" + std::string(key) + "'");
  }
  if (v->is_array != array || !accept(v->type)) {
    return InvalidArgumentError("GGUF '" + source_ + "': key '" + std::string(key) +
                                "': expected " + (array ? "array of " : "") +
                                std::string(expected) + ", found " + v->TypeName());
  }
  return v;
}

namespace {

bool IsString(GgufValueType t) { return t == GgufValueType::kString; }
bool IsBool(GgufValueType t) { return t == GgufValueType::kBool; }

// A u64 is stored as its bits; above 2^63 - 1 it cannot be an int64_t.
Status CheckFitsInt64(const GgufValue& v, std::string_view key, const std::string& source) {
  if (v.type != GgufValueType::kU64) return Status::Ok();
  for (int64_t x : v.ints) {
    if (x < 0) {
      return OutOfRangeError("GGUF '" + source + "': key '" + std::string(key) + "': u64 " +
                             std::to_string(static_cast<uint64_t>(x)) + " is above 2^63 - 1");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> GgufMetadata::GetString(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, false, IsString, "string"));
  return v->strings[0];
}

StatusOr<int64_t> GgufMetadata::GetInt(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, false, IsGgufIntegerType, "integer"));
  KVF_RETURN_IF_ERROR(CheckFitsInt64(*v, key, source_));
  return v->ints[0];
}

StatusOr<double> GgufMetadata::GetFloat(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, false, IsGgufFloatType, "f32 or f64"));
  return v->floats[0];
}

StatusOr<bool> GgufMetadata::GetBool(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, false, IsBool, "bool"));
  return v->ints[0] != 0;
}

StatusOr<std::vector<std::string>> GgufMetadata::GetStringArray(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, true, IsString, "string"));
  return v->strings;
}

StatusOr<std::vector<int64_t>> GgufMetadata::GetIntArray(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, true, IsGgufIntegerType, "integer"));
  KVF_RETURN_IF_ERROR(CheckFitsInt64(*v, key, source_));
  return v->ints;
}

StatusOr<std::vector<double>> GgufMetadata::GetFloatArray(std::string_view key) const {
  KVF_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, true, IsGgufFloatType, "f32 or f64"));
  return v->floats;
}

}  // namespace kvferry::formats
