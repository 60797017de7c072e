// Length-prefixed frames over a stream socket, for the two-process transfer tests: the test
// and its peer helper exchange metadata and commands this way (out of band, as a real side
// channel would). Every read has a deadline.
//
// Thread-safety: one reader and one writer per fd.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "kvferry/common/deadline.h"

namespace kvferry::transfer::testing {

inline bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool ReadAll(int fd, void* p, size_t n, Deadline deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int left = static_cast<int>(deadline.RemainingMs());
    if (left <= 0 || poll(&pfd, 1, left) <= 0) return false;
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool SendFrame(int fd, const std::string& s) {
  uint64_t n = s.size();
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, s.data(), s.size());
}

inline std::optional<std::string> RecvFrame(int fd, Deadline deadline) {
  uint64_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n), deadline)) return std::nullopt;
  std::string s(n, '\0');
  if (!ReadAll(fd, s.data(), n, deadline)) return std::nullopt;
  return s;
}

// The peer's initial buffer contents: a function of the index, so both sides know it.
inline uint8_t InitialByte(uint64_t i) { return static_cast<uint8_t>((i * 131 + 7) ^ (i >> 11)); }
// Bytes the test writes, a function of (seed, index).
inline uint8_t SeededByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761u + seed * 40503u) >> 7);
}

}  // namespace kvferry::transfer::testing
