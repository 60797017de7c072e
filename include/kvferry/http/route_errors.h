// The error handler both front ends (`kvferry serve`, `kvferry proxy`) give httplib, for the
// answers httplib makes itself before or instead of a route's handler: an OpenAI error body on
// each (404 for a path no route serves, 400 for a request it cannot parse, 413 past the payload
// limit, ...), and 405 Method Not Allowed with an Allow header, instead of httplib's 404 or 400,
// when the path is a route served with another method (a PUT on /v1/completions, a TRACE on
// /health), and 408 Request Timeout instead of httplib's 400 when a request's body stopped short
// of its Content-Length (it stalled past httplib's read timeout, or the connection ended: the
// request did not arrive, it was not malformed; a proxy in front may try another member). A
// handler's own answer (a body already set) is left as it is.
//
// Thread-safety: call from the thread that sets up the server, before it listens.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

namespace kvferry::http {

struct Route {
  std::string method;  // "GET", "POST"
  std::string path;
};

void InstallErrorHandler(httplib::Server& http, std::vector<Route> routes);

}  // namespace kvferry::http
