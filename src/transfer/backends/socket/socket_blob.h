// The socket backend's part of the agent metadata (the backend blob inside the versioned,
// checksummed envelope of src/transfer/metadata.h): where the agent listens and the secret a
// connection must open with. Internal to src/transfer/backends/socket.
//
// Layout, host byte order (a peer of the other byte order fails the magic check):
//   u32 kWireMagic | u32 kWireVersion | u16 port | u64 secret | u16 host length | host bytes
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::transfer::sock {

struct SocketBlob {
  std::string host;  // the address peers reach the listener at (SocketOptions::listen_host)
  uint16_t port = 0;
  uint64_t secret = 0;  // the hello of every inbound connection must carry it
};

std::string EncodeSocketBlob(const SocketBlob& blob);
// InvalidArgument for a truncated blob, another magic or version, an empty host, port 0, or
// bytes beyond the host.
StatusOr<SocketBlob> DecodeSocketBlob(std::string_view bytes);

}  // namespace kvferry::transfer::sock
