// Typed readers of the optional fields of a JSON object a user wrote, shared by the connector's
// parsers of user JSON: kv_transfer_config.cc (`--kv-transfer-config`) and kv_transfer_params.cc
// (`kv_transfer_params` in a request body). Internal to src/connector; header-only so that the
// fuzz targets, which compile kv_transfer_params.cc directly, need no other source.
//
// A field that is absent or null leaves its output untouched (the caller's default stands) and
// sets `*present` to false. A field of the wrong type or out of range is InvalidArgument, with a
// message "<prefix><field>: <what>", e.g. "kv_transfer_params.tp_size: must be an integer".
// Thread-safety: a JsonFields only reads the object it was given; use it on one thread.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::connector {

class JsonFields {
 public:
  // `object` must outlive this; `prefix` names it in errors ("kv_transfer_params.").
  JsonFields(const nlohmann::json& object, std::string_view prefix)
      : object_(object), prefix_(prefix) {}

  // The value of a present, non-null field; null otherwise.
  const nlohmann::json* Find(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status Error(std::string_view field, std::string_view what) const {
    return InvalidArgumentError(fmt::format("{}{}: {}", prefix_, field, what));
  }

  Status Bool(const char* key, bool* out, bool* present = nullptr) const {
    const nlohmann::json* v = Found(key, present);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean()) return Error(key, "must be a boolean");
    *out = v->get<bool>();
    return Status::Ok();
  }

  Status String(const char* key, std::string* out, bool* present = nullptr) const {
    const nlohmann::json* v = Found(key, present);
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) return Error(key, "must be a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }

  // An integer in [lo, hi]; [lo, hi] must fit Int.
  template <typename Int>
  Status Integer(const char* key, int64_t lo, int64_t hi, Int* out, bool* present = nullptr) const {
    const nlohmann::json* v = Found(key, present);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number_integer()) return Error(key, "must be an integer");
    // Unsigned values above int64 max do not fit get<int64_t>().
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Error(key, fmt::format("must be in [{}, {}]", lo, hi));
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return Error(key, fmt::format("must be in [{}, {}]", lo, hi));
    *out = static_cast<Int>(x);
    return Status::Ok();
  }

 private:
  const nlohmann::json* Found(const char* key, bool* present) const {
    const nlohmann::json* v = Find(key);
    if (present != nullptr) *present = v != nullptr;
    return v;
  }

  const nlohmann::json& object_;
  std::string prefix_;
};

}  // namespace kvferry::connector
