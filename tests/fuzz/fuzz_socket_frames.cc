// libFuzzer target: the socket backend's inbound frame checks (src/transfer/backends/socket/
// socket_frame.h), the code its I/O thread runs on every header and request before a byte of
// payload lands (socket_io.cc).
//
// The input is one connection's byte stream: byte 0 picks the connection's side (bit 0: this
// agent opened it, the initiator) and whether a hello was already accepted (bit 1); then frames
// follow as on the wire (a FrameHdr, then `length` payload bytes, cut at the input's end). Each
// header goes through CheckHeader as the receiver would; an accepted one is then handled as
// socket_io.cc does (a write segment placed with PlaceWrite and copied into the region, a read
// request's entries checked with CheckReadEntries and then read from the regions); the first
// refusal that closes the connection ends the stream.
//
// Properties checked on every input, besides "no crash, no sanitizer report":
//   - an accepted header is one an agent may send: a hello with the magic, version and secret,
//     once; a read request of count > 0 entries, exactly its length, within the control limit;
//     a notification within the limit (so the receive buffer is bounded); a write segment with
//     index < count; no request on the initiator's side, no reply on the target's;
//   - an accepted range (write segment, read entry) lies inside its registered region, and a
//     refused one does not (checked against an independent 128-bit bound); the regions are
//     separate heap blocks of exactly their size, so ASan sees any byte outside;
//   - every refusal is counted once, under a named reason.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transfer/backends/socket/socket_frame.h"

namespace {

using namespace kvferry::transfer::sock;

// The seeds' hellos carry this secret (tests/fuzz/gen_socket_seeds.cc).
constexpr uint64_t kSecret = 0x5345435245543031ull;

// A failed property names itself, then aborts (libFuzzer keeps the input).
#define Check(ok)                                                            \
  do {                                                                       \
    if (!(ok)) {                                                             \
      std::fprintf(stderr, "property failed, line %d: %s\n", __LINE__, #ok); \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

// Regions 1 (4 KiB), 2 (64 bytes) and 3 (empty, with a null base), each its own heap block.
struct Memory {
  std::vector<std::vector<uint8_t>> blocks;
  RegionTable table;
  Memory() {
    const uint64_t sizes[] = {4096, 64, 0};
    for (uint64_t n : sizes) blocks.emplace_back(n, 0xA5);
    for (uint32_t i = 0; i < 3; ++i) {
      table[i + 1] = {blocks[i].data(), blocks[i].size()};
    }
  }
};

// The oracle: [offset, offset + length) inside region `id`.
bool Inside(const RegionTable& t, uint32_t id, uint64_t offset, uint64_t length) {
  auto it = t.find(id);
  return it != t.end() && static_cast<unsigned __int128>(offset) + length <= it->second.length;
}

class Connection {
 public:
  Connection(bool outbound, bool hello_seen) : outbound_(outbound), hello_seen_(hello_seen) {}

  // One frame; false once the connection is closed.
  bool Frame(const FrameHdr& h, const uint8_t* payload, size_t available) {
    const HeaderVerdict v = CheckHeader(h, outbound_, hello_seen_, kSecret);
    if (v.refusal != Refusal::kNone) {
      Refuse(v.refusal);
      return false;
    }
    CheckAccepted(h, v.payload);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(h.length, available));
    if (h.type == kHello) hello_seen_ = true;
    if (v.payload == Payload::kWriteData) Write(h, payload, n);
    if (h.type == kReadReq && n == h.length) Read(payload, h.count);
    return true;
  }

  const RefusalCounts& counts() const { return counts_; }
  uint64_t refusals() const { return refusals_; }

 private:
  void Refuse(Refusal r) {
    Check(r != Refusal::kNone && r != Refusal::kCount && !RefusalName(r).empty());
    counts_.Count(r);
    ++refusals_;
  }

  void CheckAccepted(const FrameHdr& h, Payload p) const {
    Check(h.type != kHello || (!outbound_ && !hello_seen_ && h.token == kSecret &&
                               h.code == static_cast<int32_t>(kWireMagic) &&
                               h.offset == kWireVersion && h.length <= 4096));
    Check(outbound_ || hello_seen_ || h.type == kHello);
    if (p == Payload::kBuffer) Check(h.length <= kMaxControlPayload && !outbound_);
    if (h.type == kReadReq) Check(h.count > 0 && h.length == uint64_t{h.count} * 24);
    if (p == Payload::kWriteData) Check(!outbound_ && h.index < h.count);
    if (p == Payload::kReadData || p == Payload::kReply) Check(outbound_);
    if (p == Payload::kReply) Check(h.length == 0);
  }

  void Write(const FrameHdr& h, const uint8_t* payload, size_t n) {
    Refusal why = Refusal::kNone;
    uint8_t* dest = PlaceWrite(h, memory_.table, &why);
    Check(Inside(memory_.table, h.region, h.offset, h.length) == (why == Refusal::kNone));
    if (why != Refusal::kNone) {
      Check(dest == nullptr);
      Refuse(why);  // discarded, acknowledged with an error; the connection stays
      return;
    }
    const Region& r = memory_.table.at(h.region);
    Check(dest == r.base + h.offset);
    if (n > 0) std::memcpy(dest, payload, n);  // ASan: inside the region's block
  }

  void Read(const uint8_t* payload, uint32_t count) {
    std::vector<ReadEntry> es(count);
    std::memcpy(es.data(), payload, es.size() * sizeof(ReadEntry));
    bool all_inside = true;
    for (const ReadEntry& e : es) all_inside &= Inside(memory_.table, e.region, e.offset, e.length);
    const Refusal why = CheckReadEntries(es.data(), count, memory_.table);
    Check(all_inside == (why == Refusal::kNone));
    if (why != Refusal::kNone) {
      Refuse(why);  // answered with kReadErr; the connection stays
      return;
    }
    uint64_t sum = 0;
    for (const ReadEntry& e : es) {
      const uint8_t* src = memory_.table.at(e.region).base + e.offset;
      for (uint64_t i = 0; i < e.length; i += 61) sum += src[i];  // ASan: inside the block
      if (e.length > 0) sum += src[e.length - 1];
    }
    sink_ = sink_ + sum;
  }

  const bool outbound_;
  bool hello_seen_;
  Memory memory_;
  RefusalCounts counts_;
  uint64_t refusals_ = 0;
  volatile uint64_t sink_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Connection conn((data[0] & 1) != 0, (data[0] & 2) != 0);
  size_t at = 1;
  while (size - at >= sizeof(FrameHdr)) {
    FrameHdr h;
    std::memcpy(&h, data + at, sizeof(h));
    at += sizeof(h);
    const size_t available = size - at;
    if (!conn.Frame(h, data + at, available)) break;
    if (h.length > available) break;  // the rest would still be on its way
    at += static_cast<size_t>(h.length);
  }
  Check(conn.counts().total() == conn.refusals());
  return 0;
}
