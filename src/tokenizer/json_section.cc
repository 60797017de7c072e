#include "tokenizer/json_section.h"

#include <fmt/format.h>

namespace kvferry::tokenizer {
namespace {

const nlohmann::json& Null() {
  static const nlohmann::json null_value;
  return null_value;
}

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

}  // namespace

std::string JsonSection::Where() const {
  return fmt::format("{}: {}", file_, path_.empty() ? "(top)" : path_);
}

Status JsonSection::Invalid(std::string_view what) const {
  return InvalidArgumentError(fmt::format("{}: {}", Where(), what));
}

Status JsonSection::Unsupported(std::string_view what) const {
  return UnimplementedError(fmt::format("{}: {}", Where(), what));
}

StatusOr<std::string> JsonSection::Type() const {
  if (!j_->is_object()) return Invalid("must be an object");
  return String("type");
}

JsonSection JsonSection::Member(const char* key) const {
  const nlohmann::json* v = nullptr;
  if (j_->is_object()) {
    auto it = j_->find(key);
    if (it != j_->end()) v = &*it;
  }
  return JsonSection(v ? *v : Null(), file_, Join(path_, key));
}

JsonSection JsonSection::Element(size_t index) const {
  const nlohmann::json& v = j_->is_array() && index < j_->size() ? (*j_)[index] : Null();
  return JsonSection(v, file_, fmt::format("{}[{}]", path_, index));
}

const nlohmann::json* JsonSection::Find(const char* key) const {
  if (!j_->is_object()) return nullptr;
  auto it = j_->find(key);
  if (it == j_->end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::string> JsonSection::String(const char* key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return Invalid(fmt::format("missing string \"{}\"", key));
  if (!v->is_string()) return Invalid(fmt::format("\"{}\" must be a string", key));
  return v->get<std::string>();
}

StatusOr<JsonSection> JsonSection::Array(const char* key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr || !v->is_array()) return Invalid(fmt::format("\"{}\" must be an array", key));
  return JsonSection(*v, file_, Join(path_, key));
}

StatusOr<std::string> JsonSection::StringOr(const char* key, std::string fallback) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return Invalid(fmt::format("\"{}\" must be a string", key));
  return v->get<std::string>();
}

StatusOr<bool> JsonSection::BoolOr(const char* key, bool fallback) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return Invalid(fmt::format("\"{}\" must be a boolean", key));
  return v->get<bool>();
}

StatusOr<int64_t> JsonSection::IntOr(const char* key, int64_t fallback, int64_t lo,
                                     int64_t hi) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return fallback;
  const bool in_range = v->is_number_integer() &&
                        !(v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) &&
                        v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!in_range) return Invalid(fmt::format("\"{}\" must be an integer in [{}, {}]", key, lo, hi));
  return v->get<int64_t>();
}

}  // namespace kvferry::tokenizer
