// The socket backend's frame checks: what a receiver does with an arriving frame header, and
// whether a read request's entries or a write segment lie inside the registered regions. Pure
// functions over the header, the connection's direction and hello state, and the region table,
// used by socket_io.cc (the I/O thread) and driven directly by tests/fuzz/fuzz_socket_frames.cc.
// Every refusal names one Refusal reason, which the backend counts (Agent::Stats).
//
// Thread-safety: pure functions over values; RefusalCounts is plain data (the backend guards
// its own with its mutex).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string_view>

#include "transfer/backends/socket/socket_wire.h"

namespace kvferry::transfer::sock {

// Why a receiver refused an inbound connection, frame or range. Every value but kNone is
// counted; the names are the `reason` label of Agent::Stats' refused_inbound.
enum class Refusal : uint8_t {
  kNone = 0,
  kNoHello,             // a first frame that is not a hello
  kBadHello,            // wrong magic (byte order) or version, an over-long name, a second hello
  kBadSecret,           // a hello without the secret from this agent's metadata
  kUnknownType,         // a frame type no agent sends
  kOversizeControl,     // a read request or notification over kMaxControlPayload
  kLengthMismatch,      // a read request whose length is not count entries; a reply with bytes
  kBadIndex,            // a write segment with count 0 or index past count
  kWrongDirection,      // a request on an outbound connection, a reply on an inbound one
  kUnregisteredRegion,  // a read or write naming a region this agent has not registered
  kOutOfRegion,         // a read or write past the region's end (or wrapping around)
  kReplyMismatch,       // read data that does not match the read this agent asked for
  kCount,
};
inline constexpr size_t kNumRefusals = static_cast<size_t>(Refusal::kCount);

// "no_hello", "bad_secret", ...; "" for kNone.
std::string_view RefusalName(Refusal r);

// Refusals so far, per reason.
struct RefusalCounts {
  std::array<uint64_t, kNumRefusals> n{};
  void Count(Refusal r) { ++n[static_cast<size_t>(r)]; }
  uint64_t operator[](Refusal r) const { return n[static_cast<size_t>(r)]; }
  uint64_t total() const;
};

struct Region {
  uint8_t* base = nullptr;
  uint64_t length = 0;
};
using RegionTable = std::map<uint32_t, Region>;

// Where a frame's payload goes, once its header passed the checks.
enum class Payload {
  kBuffer,     // hello, read request, notification: into the connection's buffer
  kWriteData,  // a write segment: into a region (PlaceWrite says where)
  kReadData,   // a read reply: into the initiator's destination (checked against its transfer)
  kReply,      // read error, write ack: no payload
};

struct HeaderVerdict {
  Refusal refusal = Refusal::kNone;  // not kNone: the connection is closed
  Payload payload = Payload::kBuffer;
};

// The checks every header passes before a byte of its payload is read. `outbound`: this agent
// opened the connection (it is the initiator); `hello_seen`: the peer's hello was accepted.
HeaderVerdict CheckHeader(const FrameHdr& h, bool outbound, bool hello_seen, uint64_t secret);

// The region and range [offset, offset + length) of region `id`, or nullptr (with the reason
// in `why`, when given) if it is not registered or the range is not inside it.
const Region* FindRegion(const RegionTable& regions, uint32_t id, uint64_t offset, uint64_t length,
                         Refusal* why = nullptr);

// Where a write segment (a kWriteData header that passed CheckHeader) lands: its bytes'
// address inside a region, with `why` kNone; else `why` says why not (the bytes are then
// discarded and the write acknowledged with an error) and the result is nullptr. Test `why`,
// not the pointer: an empty region may have a null base.
uint8_t* PlaceWrite(const FrameHdr& h, const RegionTable& regions, Refusal* why);

// A read request's payload (count ReadEntry, as CheckHeader let through): kNone if every entry
// lies inside a registered region, else the first entry's reason (the read is answered with
// kReadErr, no data).
Refusal CheckReadEntries(const ReadEntry* entries, uint32_t count, const RegionTable& regions);

}  // namespace kvferry::transfer::sock
