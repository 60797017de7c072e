// Binding call arguments to a builtin's parameters, as a Python signature does: positional
// arguments fill parameters in order, keywords by name; too many, unknown, repeated or missing
// ones are TypeErrors (kInvalidArgument) naming the function.
//
// Thread-safety: values; pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

class BoundArgs {
 public:
  // Binds `args` to `params`; the first `required` parameters must be given.
  static StatusOr<BoundArgs> Bind(std::string_view fn, const CallArgs& args,
                                  std::initializer_list<std::string_view> params,
                                  size_t required = 0);

  // The argument for parameter `i`, or nullptr if not given.
  const Value* Get(size_t i) const { return given_[i] ? &values_[i] : nullptr; }
  // The argument for parameter `i`, or `fallback`.
  Value GetOr(size_t i, Value fallback) const { return given_[i] ? values_[i] : fallback; }
  bool Has(size_t i) const { return given_[i]; }

 private:
  std::vector<Value> values_;
  std::vector<bool> given_;
};

// Argument conversions with Python's TypeErrors ("fn() argument 'x' must be str, not int").
StatusOr<std::string> ArgString(std::string_view fn, std::string_view param, const Value& v);
// An int (or bool, an int subclass).
StatusOr<int64_t> ArgInt(std::string_view fn, std::string_view param, const Value& v);

}  // namespace kvferry::jinja
