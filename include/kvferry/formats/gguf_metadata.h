// GGUF metadata: the typed key-value pairs of a GGUF file (llama.cpp's format), and typed
// accessors that say what they found when it is not what the caller expects.
//
// A value is a scalar (u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool, string) or an
// array of one of those. GGUF also allows arrays of arrays; llama.cpp does not read them and
// neither does kvferry (the parser refuses them).
//
// Thread-safety: values; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::formats {

// The on-disk type ids (gguf_metadata_value_type).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u8", "i32", "f32", "bool", "string", "array", ...
std::string_view GgufValueTypeName(GgufValueType type);
bool IsGgufIntegerType(GgufValueType type);  // u8 .. i64
bool IsGgufFloatType(GgufValueType type);    // f32, f64

// One value. A scalar is stored like an array of one element.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;  // the scalar or element type, never kArray
  bool is_array = false;
  // Integer types and bool (0 / 1), as 64-bit two's complement: a u64 above 2^63 - 1 reads
  // negative here, and the writer stores the same bits back.
  std::vector<int64_t> ints;
  std::vector<double> floats;  // f32 (widened exactly) and f64
  std::vector<std::string> strings;

  // "u32", "array of string", ...
  std::string TypeName() const;
  size_t size() const;  // number of elements (1 for a scalar)

  // Builders. `type` must be an integer type for Int*, a float type for Float*; f32 values are
  // rounded to float, as a file holds them.
  static GgufValue Int(GgufValueType type, int64_t value);
  static GgufValue Float(GgufValueType type, double value);
  static GgufValue Bool(bool value);
  static GgufValue String(std::string value);
  static GgufValue IntArray(GgufValueType type, std::vector<int64_t> values);
  static GgufValue FloatArray(GgufValueType type, std::vector<double> values);
  static GgufValue BoolArray(const std::vector<bool>& values);
  static GgufValue StringArray(std::vector<std::string> values);

  friend bool operator==(const GgufValue&, const GgufValue&) = default;

 private:
  GgufValue AsScalar() &&;
};

// The key-value pairs in file order, looked up by key.
class GgufMetadata {
 public:
  GgufMetadata() = default;
  // `source` names the file in errors.
  explicit GgufMetadata(std::string source) : source_(std::move(source)) {}

  // AlreadyExists when the key is there.
  Status Add(std::string key, GgufValue value);

  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr when absent

  // NotFound when the key is absent; InvalidArgument naming the key, the expected and the
  // actual type when it has another type.
  StatusOr<std::string> GetString(std::string_view key) const;
  // Any integer type (not bool); OutOfRange for a u64 above 2^63 - 1.
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;  // f32 or f64
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;

  friend bool operator==(const GgufMetadata& a, const GgufMetadata& b) {
    return a.entries_ == b.entries_;
  }

 private:
  // The value of `key` if it is an array (or not) of a type `accept` takes.
  StatusOr<const GgufValue*> Typed(std::string_view key, bool array, bool (*accept)(GgufValueType),
                                   std::string_view expected) const;

  std::string source_;
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, size_t, std::less<>> by_key_;  // index into entries_
};

}  // namespace kvferry::formats
