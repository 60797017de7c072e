// Length-prefixed frames (8-byte host-order length, then the bytes) over a connected stream
// socket, every read bounded by a deadline. For the out-of-band control channels of the
// two-process transfer tests and `kvferry bench xfer` (both ends on one build, hence host order);
// the product's side channel is ZeroMQ (connector/side_channel.h), not this.
//
// Thread-safety: one reader and one writer per fd at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kvferry/common/deadline.h"

namespace kvferry {

// Frames longer than this are refused by RecvFrame (a corrupt length must not allocate 2^64).
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 30;

// Writes all n bytes (MSG_NOSIGNAL: a closed peer is false, not SIGPIPE).
bool WriteAll(int fd, const void* p, size_t n);
// Reads exactly n bytes; false on EOF, error or the deadline.
bool ReadAll(int fd, void* p, size_t n, Deadline deadline);

bool SendFrame(int fd, const std::string& frame);
// The next frame; nullopt on EOF, error, the deadline, or a length over kMaxFrameBytes.
std::optional<std::string> RecvFrame(int fd, Deadline deadline);

}  // namespace kvferry
