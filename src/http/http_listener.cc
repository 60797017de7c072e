#include "kvferry/http/http_listener.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>

#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"

namespace kvferry::http {
namespace {

// httplib 0.11 as Debian builds it listens with a backlog of 5. Under a burst of connections
// (64 clients through the proxy, the proxy's own legs to P and D) the accept queue overflows,
// SYNs are dropped or answered with SYN cookies, and a failed cookie check resets a connection
// whose request was already sent: the client sees a reset with no answer. Linux lets listen()
// be called again on a listening socket to change its backlog (capped by net.core.somaxconn).
constexpr int kListenBacklog = 1024;

// Address reuse for a quick restart on the same port, but not SO_REUSEPORT, which httplib's
// default sets: with it a second server on a port in use would bind silently and share it.
void ReuseAddress(int fd) {
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// Each open connection is a descriptor. The soft limit is often 1024, below what a front end
// with --max-connections 1024 plus its upstream and transfer sockets needs; raise it to the hard
// limit (which only root may raise) so accept() does not fail with EMFILE first.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t was = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    KVF_LOG_DEBUG("HTTP listener: open-file limit raised from {} to {}", was, limit.rlim_cur);
  }
}

}  // namespace

StatusOr<int> StartHttpListener(httplib::Server& http, const std::string& host, int port,
                                std::thread* thread) {
  RaiseDescriptorLimit();
  auto listen_fd = std::make_shared<int>(-1);
  http.set_socket_options([listen_fd](int fd) {
    ReuseAddress(fd);
    *listen_fd = fd;  // the last socket made is the one that bound
  });
  int bound_port =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound_port <= 0) {
    return UnavailableError("cannot listen on " + host + ":" + std::to_string(port) +
                            " (address in use, or not an address of this host)");
  }
  int accepting = 0;
  socklen_t len = sizeof(accepting);
  if (*listen_fd < 0 ||
      ::getsockopt(*listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting ||
      ::listen(*listen_fd, kListenBacklog) != 0) {
    KVF_LOG_WARN(
        "HTTP listener on {}:{}: could not raise the listen backlog; bursts of "
        "connections may be reset",
        host, bound_port);
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

}  // namespace kvferry::http
