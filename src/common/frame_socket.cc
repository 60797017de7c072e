#include "kvferry/common/frame_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kvferry {

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n, Deadline deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int left = static_cast<int>(std::min<int64_t>(deadline.RemainingMs(), 1 << 30));
    if (left <= 0) return false;
    const int ready = ::poll(&pfd, 1, left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SendFrame(int fd, const std::string& frame) {
  const uint64_t n = frame.size();
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, frame.data(), frame.size());
}

std::optional<std::string> RecvFrame(int fd, Deadline deadline) {
  uint64_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n), deadline) || n > kMaxFrameBytes) return std::nullopt;
  std::string s(n, '\0');
  if (!ReadAll(fd, s.data(), n, deadline)) return std::nullopt;
  return s;
}

}  // namespace kvferry
