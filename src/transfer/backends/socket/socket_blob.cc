#include "transfer/backends/socket/socket_blob.h"

#include <cstring>

#include "transfer/backends/socket/socket_wire.h"

namespace kvferry::transfer::sock {

std::string EncodeSocketBlob(const SocketBlob& b) {
  std::string s;
  auto put = [&s](const auto& v) { s.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kWireMagic);
  put(kWireVersion);
  put(b.port);
  put(b.secret);
  put(static_cast<uint16_t>(b.host.size()));
  s += b.host;
  return s;
}

StatusOr<SocketBlob> DecodeSocketBlob(std::string_view s) {
  uint32_t magic = 0, version = 0;
  uint16_t host_len = 0;
  SocketBlob b;
  constexpr size_t kFixed = 4 + 4 + 2 + 8 + 2;
  if (s.size() < kFixed) return InvalidArgumentError("socket metadata: truncated");
  const char* p = s.data();
  std::memcpy(&magic, p, 4);
  std::memcpy(&version, p + 4, 4);
  std::memcpy(&b.port, p + 8, 2);
  std::memcpy(&b.secret, p + 10, 8);
  std::memcpy(&host_len, p + 18, 2);
  if (magic != kWireMagic) return InvalidArgumentError("socket metadata: bad magic");
  if (version != kWireVersion) {
    return InvalidArgumentError("socket metadata: version " + std::to_string(version) +
                                ", this build speaks " + std::to_string(kWireVersion));
  }
  if (s.size() != kFixed + host_len || host_len == 0 || b.port == 0) {
    return InvalidArgumentError("socket metadata: bad address");
  }
  b.host.assign(p + kFixed, host_len);
  return b;
}

}  // namespace kvferry::transfer::sock
