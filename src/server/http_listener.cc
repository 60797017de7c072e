#include "server/http_listener.h"

#include <chrono>

#include "kvferry/common/deadline.h"

namespace kvferry::server {

StatusOr<int> StartHttpListener(httplib::Server& http, const std::string& host, int port,
                                std::thread* thread) {
  int bound_port =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound_port <= 0) {
    return UnavailableError("cannot listen on " + host + ":" + std::to_string(port));
  }
  *thread = std::thread([&http] { http.listen_after_bind(); });
  // stop() before the listener runs would be lost (httplib checks is_running()); wait for it.
  const Deadline ready = Deadline::AfterMs(5000);
  while (!http.is_running() && !ready.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!http.is_running()) return InternalError("HTTP listener did not start");
  return bound_port;
}

}  // namespace kvferry::server
