// The socket backend's wire format (docs/transfer.md, "Socket backend"). Internal to
// src/transfer/backends/socket.
//
// One TCP connection per (initiator, target) pair, opened by the initiator in AddPeer. Every
// message is a fixed 48-byte FrameHdr, in host byte order (both ends check kWireMagic in the
// hello, so a peer of the other byte order is refused), followed by `length` payload bytes:
//
//   initiator -> target                       target -> initiator
//   kHello     payload: agent name            kReadData  one entry's bytes (index = entry)
//   kReadReq   payload: ReadEntry[count]      kReadErr   code: why no data will come
//   kWriteData payload: the bytes for         kWriteAck  code: OK or why the write failed
//              (region, offset), index/count
//   kNotify    payload: message; token != 0: deliver only if that write succeeded
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>

namespace kvferry::transfer::sock {

inline constexpr uint32_t kWireMagic = 0x4b564653;  // "KVFS"
inline constexpr uint32_t kWireVersion = 1;
// Largest control payload (hello, read request, notification) a receiver accepts; data
// payloads are bounded by the registered region they land in.
inline constexpr uint64_t kMaxControlPayload = 64ull << 20;

enum FrameType : uint8_t {
  kHello = 1,
  kReadReq = 2,
  kReadData = 3,
  kReadErr = 4,
  kWriteData = 5,
  kWriteAck = 6,
  kNotify = 7,
};

struct FrameHdr {
  uint8_t type = 0;
  uint8_t pad[3] = {0, 0, 0};
  int32_t code = 0;     // a StatusCode (kReadErr, kWriteAck); kWireMagic in kHello
  uint64_t token = 0;   // the initiator's transfer token
  uint64_t offset = 0;  // kWriteData: offset in the region; kHello: kWireVersion
  uint64_t length = 0;  // payload bytes that follow
  uint32_t region = 0;  // kWriteData: the target's region id
  uint32_t index = 0;   // kReadData / kWriteData: which segment
  uint32_t count = 0;   // kReadReq / kWriteData: segments in the transfer
  uint32_t pad2 = 0;
};
static_assert(sizeof(FrameHdr) == 48);

struct ReadEntry {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t region = 0;
  uint32_t pad = 0;
};
static_assert(sizeof(ReadEntry) == 24);

}  // namespace kvferry::transfer::sock
