// Typed reads of one section of a tokenizer file (tokenizer.json, tokenizer_config.json) whose
// errors name the file and the section, e.g.
//   "tokenizer.json: pre_tokenizer.pretokenizers[1]: unsupported type \"Whitespace\"".
// A malformed value is kInvalidArgument; a well-formed but unsupported one is kUnimplemented.
//
// Internal to src/tokenizer. Thread-safety: reads the JSON it was given; one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::tokenizer {

class JsonSection {
 public:
  // `j` must outlive this section and its children.
  JsonSection(const nlohmann::json& j, std::string file, std::string path)
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  const std::string& path() const { return path_; }

  // "file: path", the prefix of this section's errors.
  std::string Where() const;
  Status Invalid(std::string_view what) const;
  Status Unsupported(std::string_view what) const;

  // The section itself must be an object with a string "type".
  StatusOr<std::string> Type() const;
  // A sub-section (object member `key` or array element `index`), possibly null.
  JsonSection Member(const char* key) const;
  JsonSection Element(size_t index) const;
  bool IsNull() const { return j_->is_null(); }

  // Required members.
  StatusOr<std::string> String(const char* key) const;
  StatusOr<JsonSection> Array(const char* key) const;
  // Optional members: absent or null gives `fallback`.
  StatusOr<std::string> StringOr(const char* key, std::string fallback) const;
  StatusOr<bool> BoolOr(const char* key, bool fallback) const;
  StatusOr<int64_t> IntOr(const char* key, int64_t fallback, int64_t lo, int64_t hi) const;

 private:
  const nlohmann::json* Find(const char* key) const;  // null if absent or null

  const nlohmann::json* j_;
  std::string file_;
  std::string path_;
};

}  // namespace kvferry::tokenizer
