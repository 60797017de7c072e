#include "port_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include "kvferry/common/tsan_ignore.h"

namespace kvferry::http {
namespace {

// Port of a TCP socket's local address; 0 for anything else.
int LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

}  // namespace

void ForEachSocketOnPort(int port, const std::function<void(int fd)>& fn) {
  // Other threads open and close these descriptors meanwhile (common/tsan_ignore.h): a call on
  // one that closed fails, and the callers check the socket they act on (request_deadline.cc).
  std::vector<int> fds;
  {
    [[maybe_unused]] TsanIgnoreScope ignore;
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return;
    while (const dirent* e = ::readdir(dir)) {
      const int fd = std::atoi(e->d_name);
      struct stat st {};
      if (fd <= 2 || fd == ::dirfd(dir) || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      if (LocalPort(fd) == port) fds.push_back(fd);
    }
    ::closedir(dir);
  }
  for (int fd : fds) fn(fd);
}

std::string PeerKey(int fd) {
  [[maybe_unused]] TsanIgnoreScope ignore;  // as ForEachSocketOnPort
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  return fmt::format("{} {}", host, serv);
}

std::string PeerKey(const std::string& remote_addr, int remote_port) {
  return fmt::format("{} {}", remote_addr, remote_port);
}

}  // namespace kvferry::http
