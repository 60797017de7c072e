// A raw TCP client for the HTTP front ends' tests (tests only): what a slow, idle or broken
// client does, byte by byte, which httplib::Client cannot be made to do.
//
// Thread-safety: plain functions on descriptors the caller owns.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace kvferry::http::testing {

// A connected socket to 127.0.0.1:port, or -1.
int ConnectLoopback(int port);
// Sends all of `bytes` (MSG_NOSIGNAL: a closed peer is not a signal); false if it failed.
bool SendAll(int fd, std::string_view bytes);
// What the peer sends until it closes the connection or `limit` passes; `closed` tells which.
std::string ReadUntilClosed(int fd, std::chrono::milliseconds limit, bool* closed);

}  // namespace kvferry::http::testing
