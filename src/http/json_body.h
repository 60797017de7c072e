// JsonBody: a JSON value as an HTTP body, the one way the server, the proxy and the error replies
// write one: compact, and never throwing on invalid UTF-8 in a string (it is replaced by U+FFFD).
// Internal to the build tree; callers link nlohmann_json themselves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvferry::http {

inline std::string JsonBody(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvferry::http
