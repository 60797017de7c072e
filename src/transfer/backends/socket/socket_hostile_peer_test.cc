// The socket backend against a peer that is not a kvferry agent (docs/reliability.md, "Hostile
// peers"): raw TCP clients that send garbage, a hello with the wrong secret, and, having the
// target's metadata (so past the hello), frames no agent sends — an unknown type, a read
// request or notification declaring more than the control limit, reads and writes outside every
// registered region. Each connection is dropped or answered with an error, never with bytes
// outside a region, the target's memory is unchanged, and it keeps serving a real agent exactly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/transfer/agent.h"
#include "transfer/backends/socket/socket_blob.h"
#include "transfer/backends/socket/socket_wire.h"
#include "transfer/metadata.h"

namespace kvferry::transfer::sock {
namespace {

constexpr size_t kBytes = 4096;

std::string Frame(FrameHdr h, const std::string& payload = "") {
  std::string s(reinterpret_cast<const char*>(&h), sizeof(h));
  return s + payload;
}

class SocketHostilePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = std::move(*Agent::Create({.name = "target", .backend = BackendKind::kSocket}));
    std::mt19937 rng(7);
    for (auto& b : memory_) b = static_cast<uint8_t>(rng());
    expected_ = memory_;
    region_ = *target_->RegisterMemory(memory_.data(), kBytes, MemoryKind::kHost);
    metadata_ = *target_->GetLocalMetadata();
    blob_ = *DecodeSocketBlob(DecodeMetadata(metadata_)->backend_blob);
  }

  std::string Hello(uint64_t secret) const {
    const std::string name = "hostile";
    return Frame({.type = kHello,
                  .code = static_cast<int32_t>(kWireMagic),
                  .token = secret,
                  .offset = kWireVersion,
                  .length = name.size()},
                 name);
  }

  // Sends `bytes` on a new connection; returns what the target answered until it closed the
  // connection (closed = true) or went quiet for `quiet_ms`.
  std::string Exchange(const std::string& bytes, bool* closed, int quiet_ms = 2000) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(blob_.port);
    ::inet_pton(AF_INET, blob_.host.c_str(), &addr.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::string got;
    *closed = false;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, quiet_ms) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        *closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return got;
  }

  // A real agent still reads the whole region, exactly, and the memory is what it was.
  void ExpectStillServesExactly() {
    auto reader = std::move(*Agent::Create({.name = "reader", .backend = BackendKind::kSocket}));
    std::vector<uint8_t> dst(kBytes, 0);
    auto local = *reader->RegisterMemory(dst.data(), kBytes, MemoryKind::kHost);
    auto peer = *reader->LoadRemoteMetadata(metadata_);
    auto x = reader->PrepareTransfer({.op = XferOp::kRead,
                                      .peer = peer,
                                      .local = {{local, 0, kBytes}},
                                      .remote = {{region_, 0, kBytes}}});
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(reader->Post(*x).ok());
    ASSERT_TRUE(reader->Wait(*x, Deadline::AfterMs(5000)).ok());
    EXPECT_EQ(dst, expected_);
    EXPECT_EQ(memory_, expected_) << "a hostile frame changed the target's memory";
  }

  std::unique_ptr<Agent> target_;
  std::vector<uint8_t> memory_ = std::vector<uint8_t>(kBytes);
  std::vector<uint8_t> expected_;
  RegionHandle region_;
  std::string metadata_;
  SocketBlob blob_;
};

TEST_F(SocketHostilePeerTest, GarbageAndWrongHellosAreDropped) {
  std::string garbage(1000, '\0');
  std::mt19937 rng(1);
  for (char& c : garbage) c = static_cast<char>(rng());
  for (const std::string& bytes :
       {garbage, Hello(blob_.secret + 1), Frame({.type = kReadReq, .length = 24, .count = 1})}) {
    bool closed = false;
    EXPECT_EQ(Exchange(bytes, &closed), "");
    EXPECT_TRUE(closed);
  }
  ExpectStillServesExactly();
}

TEST_F(SocketHostilePeerTest, FramesNoAgentSendsAreDropped) {
  const std::vector<std::string> frames = {
      Frame({.type = 99}),  // unknown type
      Frame({.type = kReadReq,
             .length = kMaxControlPayload + 24,  // over the control limit
             .count = static_cast<uint32_t>((kMaxControlPayload + 24) / 24)}),
      Frame({.type = kNotify, .length = kMaxControlPayload + 1}),
      Frame({.type = kReadReq, .length = 48, .count = 1}),  // length disagrees with count
      Frame({.type = kReadData, .length = 8}),              // a reply, inbound
      Frame({.type = kWriteData, .length = 8, .index = 1, .count = 1}),  // index past count
      Hello(blob_.secret),                                               // a second hello
  };
  for (const std::string& f : frames) {
    bool closed = false;
    EXPECT_EQ(Exchange(Hello(blob_.secret) + f, &closed), "");
    EXPECT_TRUE(closed);
  }
  ExpectStillServesExactly();
}

TEST_F(SocketHostilePeerTest, ReadsAndWritesOutsideTheRegionsAreRefused) {
  const uint32_t id = region_.id;
  for (const ReadEntry e : {ReadEntry{.offset = kBytes - 8, .length = 16, .region = id},
                            ReadEntry{.offset = 0, .length = 8, .region = id + 100},
                            ReadEntry{.offset = ~uint64_t{0} - 4, .length = 8, .region = id}}) {
    bool closed = false;
    const std::string got = Exchange(
        Hello(blob_.secret) + Frame({.type = kReadReq, .token = 5, .length = sizeof(e), .count = 1},
                                    std::string(reinterpret_cast<const char*>(&e), sizeof(e))),
        &closed, 500);
    // At most one error reply, never data.
    ASSERT_LE(got.size(), sizeof(FrameHdr));
    if (!got.empty()) {
      FrameHdr h{};
      std::memcpy(&h, got.data(), sizeof(h));
      EXPECT_EQ(h.type, kReadErr);
      EXPECT_NE(h.code, 0);
    }
  }
  const std::string junk(16, 'J');
  for (const auto& [region, offset] : std::vector<std::pair<uint32_t, uint64_t>>{
           {id, kBytes - 8}, {id + 100, 0}, {id, ~uint64_t{0} - 4}}) {
    bool closed = false;
    const std::string got = Exchange(Hello(blob_.secret) + Frame({.type = kWriteData,
                                                                  .token = 9,
                                                                  .offset = offset,
                                                                  .length = junk.size(),
                                                                  .region = region,
                                                                  .index = 0,
                                                                  .count = 1},
                                                                 junk),
                                     &closed, 500);
    ASSERT_EQ(got.size(), sizeof(FrameHdr)) << "no write acknowledgement";
    FrameHdr h{};
    std::memcpy(&h, got.data(), sizeof(h));
    EXPECT_EQ(h.type, kWriteAck);
    EXPECT_NE(h.code, 0) << "a write outside every region was acknowledged OK";
  }
  ExpectStillServesExactly();
}

}  // namespace
}  // namespace kvferry::transfer::sock
