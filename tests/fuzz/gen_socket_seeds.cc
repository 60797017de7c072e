// Writes the seed corpus of fuzz_socket_frames (tests/fuzz/corpus/socket_frames/): byte 0 (the
// connection's side and hello state, see fuzz_socket_frames.cc), then frames as the socket
// backend sends them (headers encoded by its Pod), valid streams and streams broken in one way
// each. Run by hand when the wire format changes:
//   build/bin/fuzz_gen_socket_seeds tests/fuzz/corpus/socket_frames
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "transfer/backends/socket/socket_backend.h"

namespace {

using namespace kvferry::transfer::sock;

constexpr uint64_t kSecret = 0x5345435245543031ull;  // fuzz_socket_frames.cc expects this one
const std::string kTarget(1, '\0');                  // an inbound connection, no hello yet
const std::string kInitiator(1, '\1');               // an outbound connection

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string Hello(uint64_t secret, const std::string& name = "decode-0") {
  FrameHdr h{};
  h.type = kHello;
  h.code = static_cast<int32_t>(kWireMagic);
  h.offset = kWireVersion;
  h.token = secret;
  h.length = name.size();
  return Pod(h) + name;
}

std::string ReadRequest(uint64_t token, const std::vector<ReadEntry>& es) {
  FrameHdr h{};
  h.type = kReadReq;
  h.token = token;
  h.count = static_cast<uint32_t>(es.size());
  h.length = es.size() * sizeof(ReadEntry);
  return Pod(h) + std::string(reinterpret_cast<const char*>(es.data()), h.length);
}

std::string WriteSegment(uint64_t token, uint32_t region, uint64_t offset, uint64_t length,
                         uint32_t index, uint32_t count) {
  FrameHdr h{};
  h.type = kWriteData;
  h.token = token;
  h.region = region;
  h.offset = offset;
  h.length = length;
  h.index = index;
  h.count = count;
  return Pod(h) + std::string(length, 'w');
}

std::string Notify(uint64_t token, const std::string& message) {
  FrameHdr h{};
  h.type = kNotify;
  h.token = token;
  h.length = message.size();
  return Pod(h) + message;
}

std::string Reply(FrameType type, uint64_t token, int32_t code, uint32_t index = 0,
                  uint64_t length = 0) {
  FrameHdr h{};
  h.type = type;
  h.token = token;
  h.code = code;
  h.index = index;
  h.length = length;
  return Pod(h) + std::string(length, 'r');
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string hello = kTarget + Hello(kSecret);
  Write(dir, "read", hello + ReadRequest(1, {{0, 4096, 1, 0}, {16, 48, 2, 0}}));
  Write(dir, "write_notify",
        hello + WriteSegment(2, 1, 0, 16, 0, 2) + WriteSegment(2, 2, 32, 32, 1, 2) +
            Notify(2, "cmpl-1-0#0:1"));
  Write(dir, "notify", hello + Notify(0, "cmpl-1-0#0:2") + Notify(0, "cmpl-1-0#0:2"));
  Write(
      dir, "replies",
      kInitiator + Reply(kReadData, 1, 0, 0, 16) + Reply(kReadErr, 2, 5) + Reply(kWriteAck, 3, 0));
  Write(dir, "bad_secret", kTarget + Hello(kSecret + 1));
  Write(dir, "no_hello", kTarget + ReadRequest(1, {{0, 8, 1, 0}}));
  Write(dir, "second_hello", hello + Hello(kSecret));
  Write(dir, "write_out_of_region",
        hello + WriteSegment(3, 2, 60, 8, 0, 1) + WriteSegment(4, 9, 0, 8, 0, 1) +
            WriteSegment(5, 1, ~0ull - 3, 8, 0, 1));
  Write(dir, "read_out_of_region",
        hello + ReadRequest(6, {{4090, 8, 1, 0}}) + ReadRequest(7, {{0, 1, 3, 0}}) +
            ReadRequest(8, {{0, 8, 9, 0}}));
  Write(dir, "read_length_mismatch",
        hello + Pod(FrameHdr{.type = kReadReq, .length = 48, .count = 1}));
  Write(dir, "oversize_notify",
        hello + Pod(FrameHdr{.type = kNotify, .length = kMaxControlPayload + 1}));
  Write(dir, "request_on_initiator", kInitiator + ReadRequest(9, {{0, 8, 1, 0}}));
  Write(dir, "unknown_type", hello + Pod(FrameHdr{.type = 99}));
  return 0;
}
