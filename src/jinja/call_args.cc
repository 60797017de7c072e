#include "jinja/call_args.h"

#include <algorithm>

namespace kvferry::jinja {

StatusOr<BoundArgs> BoundArgs::Bind(std::string_view fn, const CallArgs& args,
                                    std::initializer_list<std::string_view> params,
                                    size_t required) {
  const std::vector<std::string_view> names(params);
  BoundArgs b;
  b.values_.resize(names.size());
  b.given_.assign(names.size(), false);
  const std::string f(fn);
  if (args.args.size() > names.size()) {
    return InvalidArgumentError(f + "() takes at most " + std::to_string(names.size()) +
                                " argument(s) (" + std::to_string(args.args.size()) + " given)");
  }
  for (size_t i = 0; i < args.args.size(); ++i) {
    b.values_[i] = args.args[i];
    b.given_[i] = true;
  }
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return InvalidArgumentError(f + "() got an unexpected keyword argument '" + key + "'");
    }
    const size_t i = static_cast<size_t>(it - names.begin());
    if (b.given_[i]) {
      return InvalidArgumentError(f + "() got multiple values for argument '" + key + "'");
    }
    b.values_[i] = value;
    b.given_[i] = true;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!b.given_[i]) {
      return InvalidArgumentError(f + "() missing required argument '" + std::string(names[i]) +
                                  "'");
    }
  }
  return b;
}

StatusOr<std::string> ArgString(std::string_view fn, std::string_view param, const Value& v) {
  if (v.is_string()) return v.as_string();
  return InvalidArgumentError(std::string(fn) + "() argument '" + std::string(param) +
                              "' must be str, not " + v.TypeName());
}

StatusOr<int64_t> ArgInt(std::string_view fn, std::string_view param, const Value& v) {
  if (v.is_int() || v.is_bool()) return v.as_integer();
  return InvalidArgumentError(std::string(fn) + "() argument '" + std::string(param) +
                              "' must be an integer, not " + v.TypeName());
}

}  // namespace kvferry::jinja
