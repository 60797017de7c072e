#include "kvferry/http/route_errors.h"

#include <charconv>
#include <utility>

#include "kvferry/http/http_error.h"

namespace kvferry::http {
namespace {

// The methods `path` is served with, comma-separated ("" when no route has that path, or when
// one of them is `method`).
std::string AllowedMethodsBut(const std::vector<Route>& routes, const std::string& path,
                              const std::string& method) {
  std::string allow;
  for (const Route& r : routes) {
    if (r.path != path) continue;
    if (r.method == method) return "";
    if (!allow.empty()) allow += ", ";
    allow += r.method;
  }
  return allow;
}

// The request's path. httplib leaves Request::path empty when it refuses the request line (a
// method it does not know, such as QUERY), having set `target` already.
std::string PathOf(const httplib::Request& req) {
  if (!req.path.empty()) return req.path;
  return req.target.substr(0, req.target.find('?'));
}

// Whether the request declared a Content-Length its body did not reach: httplib answers 400 when
// a body read fails, which is a body that stalled past the read timeout or a connection that
// ended, not a malformed request. `declared` is the length it announced.
bool BodyCameShort(const httplib::Request& req, size_t* declared) {
  const std::string value = req.get_header_value("Content-Length");
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *declared);
  return !value.empty() && ec == std::errc() && end == value.data() + value.size() &&
         req.body.size() < *declared;
}

}  // namespace

void InstallErrorHandler(httplib::Server& http, std::vector<Route> routes) {
  http.set_error_handler(
      [routes = std::move(routes)](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        // httplib answers these before reading the request's body: whatever of it is still on the
        // connection would be read as the next request. Close the connection instead.
        res.set_header("Connection", "close");
        const std::string path = PathOf(req);
        const std::string allow = AllowedMethodsBut(routes, path, req.method);
        if ((res.status == 404 || res.status == 400) && !allow.empty()) {
          res.status = 405;
          res.set_header("Allow", allow);
          res.set_content(OpenAiErrorBody(405, "Method " + req.method + " not allowed on " + path +
                                                   " (allowed: " + allow + ")"),
                          "application/json");
          return;
        }
        size_t declared = 0;
        if (res.status == 400 && BodyCameShort(req, &declared)) {
          res.status = 408;
          res.set_content(OpenAiErrorBody(408, "The request body did not arrive in time (" +
                                                   std::to_string(req.body.size()) + " of " +
                                                   std::to_string(declared) + " bytes)"),
                          "application/json");
          return;
        }
        const std::string msg = res.status == 404 ? "Not found: " + req.method + " " + path
                                                  : "HTTP error " + std::to_string(res.status);
        res.set_content(OpenAiErrorBody(res.status, msg), "application/json");
      });
}

}  // namespace kvferry::http
