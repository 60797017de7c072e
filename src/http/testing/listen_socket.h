// Test helpers: what the kernel says about this process's listening sockets (used by the
// listener tests of the plain and the TLS server).
//
// Thread-safety: free functions; read-only system calls.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fstream>

namespace kvferry::http::testing {

// The kernel's backlog of the listening socket bound to `port` in this process, read back
// through TCP_INFO (for a listener, tcpi_sacked holds the backlog: what `ss -lt` shows as
// Send-Q); -1 when no such socket is found.
inline int ListenBacklogOfPort(int port) {
  for (int fd = 0; fd < 4096; ++fd) {
    int accepting = 0;
    socklen_t len = sizeof(accepting);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
      continue;
    }
    sockaddr_in addr{};
    socklen_t alen = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0 ||
        addr.sin_family != AF_INET || ntohs(addr.sin_port) != port) {
      continue;
    }
    tcp_info info{};
    socklen_t ilen = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &ilen) != 0) return -1;
    return static_cast<int>(info.tcpi_sacked);
  }
  return -1;
}

inline int SomaxConn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int v = 4096;
  in >> v;
  return v;
}

}  // namespace kvferry::http::testing
