#include "kvferry/http/route_errors.h"

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
        const std::string msg = res.status == 404 ? "Not found: " + req.method + " " + path
                                                  : "HTTP error " + std::to_string(res.status);
        res.set_content(OpenAiErrorBody(res.status, msg), "application/json");
      });
}

}  // namespace kvferry::http
