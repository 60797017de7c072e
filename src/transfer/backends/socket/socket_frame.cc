// The socket backend's frame checks (socket_frame.h).
#include "transfer/backends/socket/socket_frame.h"

namespace kvferry::transfer::sock {
namespace {

// Longest agent name a hello may carry.
constexpr uint64_t kMaxHelloName = 4096;

HeaderVerdict Refuse(Refusal r) { return {r, Payload::kBuffer}; }

HeaderVerdict CheckHello(const FrameHdr& h, bool outbound, bool hello_seen, uint64_t secret) {
  if (outbound) return Refuse(Refusal::kWrongDirection);
  if (hello_seen || h.code != static_cast<int32_t>(kWireMagic) || h.offset != kWireVersion ||
      h.length > kMaxHelloName) {
    return Refuse(Refusal::kBadHello);
  }
  if (h.token != secret) return Refuse(Refusal::kBadSecret);
  return {};
}

}  // namespace

std::string_view RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kNone:
    case Refusal::kCount:
      return "";
    case Refusal::kNoHello:
      return "no_hello";
    case Refusal::kBadHello:
      return "bad_hello";
    case Refusal::kBadSecret:
      return "bad_secret";
    case Refusal::kUnknownType:
      return "unknown_type";
    case Refusal::kOversizeControl:
      return "oversize_control";
    case Refusal::kLengthMismatch:
      return "length_mismatch";
    case Refusal::kBadIndex:
      return "bad_index";
    case Refusal::kWrongDirection:
      return "wrong_direction";
    case Refusal::kUnregisteredRegion:
      return "unregistered_region";
    case Refusal::kOutOfRegion:
      return "out_of_region";
    case Refusal::kReplyMismatch:
      return "reply_mismatch";
  }
  return "";
}

uint64_t RefusalCounts::total() const {
  uint64_t sum = 0;
  for (uint64_t v : n) sum += v;
  return sum;
}

HeaderVerdict CheckHeader(const FrameHdr& h, bool outbound, bool hello_seen, uint64_t secret) {
  if (!outbound && !hello_seen && h.type != kHello) return Refuse(Refusal::kNoHello);
  switch (h.type) {
    case kHello:
      return CheckHello(h, outbound, hello_seen, secret);
    case kReadReq:
      if (outbound) return Refuse(Refusal::kWrongDirection);
      if (h.length > kMaxControlPayload) return Refuse(Refusal::kOversizeControl);
      if (h.count == 0 || h.length != uint64_t{h.count} * sizeof(ReadEntry)) {
        return Refuse(Refusal::kLengthMismatch);
      }
      return {};
    case kNotify:
      if (outbound) return Refuse(Refusal::kWrongDirection);
      if (h.length > kMaxControlPayload) return Refuse(Refusal::kOversizeControl);
      return {};
    case kWriteData:
      if (outbound) return Refuse(Refusal::kWrongDirection);
      if (h.count == 0 || h.index >= h.count) return Refuse(Refusal::kBadIndex);
      return {Refusal::kNone, Payload::kWriteData};
    case kReadData:
      if (!outbound) return Refuse(Refusal::kWrongDirection);
      return {Refusal::kNone, Payload::kReadData};
    case kReadErr:
    case kWriteAck:
      if (!outbound) return Refuse(Refusal::kWrongDirection);
      if (h.length != 0) return Refuse(Refusal::kLengthMismatch);
      return {Refusal::kNone, Payload::kReply};
    default:
      return Refuse(Refusal::kUnknownType);
  }
}

const Region* FindRegion(const RegionTable& regions, uint32_t id, uint64_t offset, uint64_t length,
                         Refusal* why) {
  auto it = regions.find(id);
  Refusal r = Refusal::kNone;
  if (it == regions.end()) {
    r = Refusal::kUnregisteredRegion;
  } else if (offset > it->second.length || length > it->second.length - offset) {
    r = Refusal::kOutOfRegion;
  }
  if (why != nullptr) *why = r;
  return r == Refusal::kNone ? &it->second : nullptr;
}

uint8_t* PlaceWrite(const FrameHdr& h, const RegionTable& regions, Refusal* why) {
  const Region* r = FindRegion(regions, h.region, h.offset, h.length, why);
  return r == nullptr ? nullptr : r->base + h.offset;
}

Refusal CheckReadEntries(const ReadEntry* entries, uint32_t count, const RegionTable& regions) {
  for (uint32_t i = 0; i < count; ++i) {
    Refusal why = Refusal::kNone;
    if (FindRegion(regions, entries[i].region, entries[i].offset, entries[i].length, &why) ==
        nullptr) {
      return why;
    }
  }
  return Refusal::kNone;
}

}  // namespace kvferry::transfer::sock
