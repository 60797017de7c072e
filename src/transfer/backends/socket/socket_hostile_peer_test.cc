// The socket backend against a peer that is not a kvferry agent (docs/reliability.md, "Hostile
// peers"): raw TCP clients that send garbage, a hello with the wrong secret, and, having the
// target's metadata (so past the hello), frames no agent sends — an unknown type, a read
// request or notification declaring more than the control limit, reads and writes outside every
// registered region. Each connection is dropped or answered with an error, never with bytes
// outside a region, the target's memory is unchanged, it keeps serving a real agent exactly, and
// each refusal is counted once under its reason (Agent::Stats().refused_inbound). And the other
// way round: a fake target whose replies do not match the read asked of it.
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
#include "transfer/backends/socket/socket_backend.h"
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

  // The target's refusals under `reason` so far.
  uint64_t Refused(const std::string& reason) const {
    const AgentStats s = target_->Stats();
    auto it = s.refused_inbound.find(reason);
    EXPECT_NE(it, s.refused_inbound.end()) << "no counter for " << reason;
    return it == s.refused_inbound.end() ? 0 : it->second;
  }
  uint64_t RefusedTotal() const {
    uint64_t n = 0;
    for (const auto& [reason, count] : target_->Stats().refused_inbound) n += count;
    return n;
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
  garbage[0] = 42;  // not a hello
  const std::vector<std::pair<std::string, std::string>> cases = {
      {garbage, "no_hello"},
      {Hello(blob_.secret + 1), "bad_secret"},
      {Frame({.type = kReadReq, .length = 24, .count = 1}), "no_hello"},
  };
  for (const auto& [bytes, reason] : cases) {
    const uint64_t before = Refused(reason), total = RefusedTotal();
    bool closed = false;
    EXPECT_EQ(Exchange(bytes, &closed), "");
    EXPECT_TRUE(closed);
    EXPECT_EQ(Refused(reason), before + 1) << reason;
    EXPECT_EQ(RefusedTotal(), total + 1) << reason;
  }
  ExpectStillServesExactly();
  EXPECT_EQ(RefusedTotal(), 3u) << "the real agent's reads were refused";
}

TEST_F(SocketHostilePeerTest, FramesNoAgentSendsAreDropped) {
  struct Case {
    std::string bytes;  // sent after a valid hello
    std::string reason;
  };
  const std::vector<Case> cases = {
      {Frame({.type = 99}), "unknown_type"},
      {Frame({.type = kReadReq,
              .length = kMaxControlPayload + 24,  // over the control limit
              .count = static_cast<uint32_t>((kMaxControlPayload + 24) / 24)}),
       "oversize_control"},
      {Frame({.type = kNotify, .length = kMaxControlPayload + 1}), "oversize_control"},
      {Frame({.type = kReadReq, .length = 48, .count = 1}), "length_mismatch"},
      {Frame({.type = kReadReq, .length = 0, .count = 0}), "length_mismatch"},
      {Frame({.type = kReadData, .length = 8}), "wrong_direction"},  // a reply, inbound
      {Frame({.type = kWriteAck}), "wrong_direction"},
      {Frame({.type = kWriteData, .length = 8, .index = 1, .count = 1}), "bad_index"},
      {Frame({.type = kWriteData, .length = 8, .index = 0, .count = 0}), "bad_index"},
      {Hello(blob_.secret), "bad_hello"},  // a second hello
  };
  for (const Case& c : cases) {
    const uint64_t before = Refused(c.reason), total = RefusedTotal();
    bool closed = false;
    EXPECT_EQ(Exchange(Hello(blob_.secret) + c.bytes, &closed), "");
    EXPECT_TRUE(closed) << c.reason;
    EXPECT_EQ(Refused(c.reason), before + 1) << c.reason;
    EXPECT_EQ(RefusedTotal(), total + 1) << c.reason;
  }
  // A hello in the other byte order (or of another version): refused before its secret.
  bool closed = false;
  EXPECT_EQ(Exchange(Frame({.type = kHello,
                            .code = static_cast<int32_t>(__builtin_bswap32(kWireMagic)),
                            .token = blob_.secret,
                            .offset = kWireVersion}),
                     &closed),
            "");
  EXPECT_TRUE(closed);
  EXPECT_EQ(Refused("bad_hello"), 2u);
  ExpectStillServesExactly();
  EXPECT_EQ(RefusedTotal(), cases.size() + 1);
}

TEST_F(SocketHostilePeerTest, ReadsAndWritesOutsideTheRegionsAreRefused) {
  const uint32_t id = region_.id;
  struct Range {
    uint32_t region;
    uint64_t offset;
    uint64_t length;
    std::string reason;
  };
  const std::vector<Range> ranges = {{id, kBytes - 8, 16, "out_of_region"},
                                     {id + 100, 0, 8, "unregistered_region"},
                                     {id, ~uint64_t{0} - 4, 8, "out_of_region"}};
  for (const Range& r : ranges) {
    const uint64_t before = Refused(r.reason);
    const ReadEntry e{.offset = r.offset, .length = r.length, .region = r.region};
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
    EXPECT_EQ(Refused(r.reason), before + 1) << "read: " << r.reason;
  }
  const std::string junk(16, 'J');
  for (const Range& r : ranges) {
    const uint64_t before = Refused(r.reason);
    bool closed = false;
    const std::string got = Exchange(Hello(blob_.secret) + Frame({.type = kWriteData,
                                                                  .token = 9,
                                                                  .offset = r.offset,
                                                                  .length = junk.size(),
                                                                  .region = r.region,
                                                                  .index = 0,
                                                                  .count = 1},
                                                                 junk),
                                     &closed, 500);
    ASSERT_EQ(got.size(), sizeof(FrameHdr)) << "no write acknowledgement";
    FrameHdr h{};
    std::memcpy(&h, got.data(), sizeof(h));
    EXPECT_EQ(h.type, kWriteAck);
    EXPECT_NE(h.code, 0) << "a write outside every region was acknowledged OK";
    EXPECT_EQ(Refused(r.reason), before + 1) << "write: " << r.reason;
  }
  ExpectStillServesExactly();
  EXPECT_EQ(RefusedTotal(), 2 * ranges.size());
}

// Reads `n` bytes from a blocking socket (false on EOF or error).
bool RecvAll(int fd, void* into, size_t n) {
  auto* p = static_cast<char*>(into);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A raw TCP listener posing as a socket-backend target with one 4 KiB region: an agent that
// loads its metadata connects, and the test answers its read requests by hand.
class FakeTarget {
 public:
  FakeTarget() {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_, 1), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~FakeTarget() {
    if (conn_ >= 0) ::close(conn_);
    ::close(listen_);
  }
  std::string Metadata() const {
    return EncodeMetadata({.backend = "socket",
                           .agent_name = "fake-target",
                           .regions = {{.id = 1, .length = kBytes}},
                           .backend_blob = EncodeSocketBlob({"127.0.0.1", port_, 77})});
  }
  // Accepts the agent's connection and reads its hello; then its read request's header.
  bool AcceptHello() {
    conn_ = ::accept(listen_, nullptr, nullptr);
    FrameHdr h{};
    if (conn_ < 0 || !RecvAll(conn_, &h, sizeof(h)) || h.type != kHello) return false;
    std::string name(h.length, '\0');
    return RecvAll(conn_, name.data(), name.size());
  }
  FrameHdr ReadRequest() {
    FrameHdr h{};
    EXPECT_TRUE(RecvAll(conn_, &h, sizeof(h)));
    EXPECT_EQ(h.type, kReadReq);
    std::string entries(h.length, '\0');
    EXPECT_TRUE(RecvAll(conn_, entries.data(), entries.size()));
    return h;
  }
  void Send(const std::string& bytes) const {
    ASSERT_EQ(::send(conn_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

 private:
  int listen_ = -1;
  int conn_ = -1;
  uint16_t port_ = 0;
};

TEST(SocketHostileTargetTest, RepliesThatMatchNoReadFailItAndAreCounted) {
  FakeTarget target;
  auto reader = std::move(*Agent::Create({.name = "reader", .backend = BackendKind::kSocket}));
  std::vector<uint8_t> dst(kBytes, 0);
  auto local = *reader->RegisterMemory(dst.data(), kBytes, MemoryKind::kHost);
  auto peer = reader->LoadRemoteMetadata(target.Metadata());
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_TRUE(target.AcceptHello());
  auto x = reader->PrepareTransfer(
      {.op = XferOp::kRead, .peer = *peer, .local = {{local, 0, 16}}, .remote = {{{1}, 0, 16}}});
  ASSERT_TRUE(x.ok()) << x.status();
  const std::string junk(8, 'J');
  struct Case {
    std::string reply;  // for a read of 16 bytes, segment 0
    const char* what;
  };
  const std::vector<Case> cases = {
      {Frame({.type = kReadData, .length = 8}, junk), "read data of another length"},
      {Frame({.type = kReadData, .length = 8, .index = 3}, junk), "read data of another segment"},
      {Frame({.type = kWriteAck}), "a write acknowledgement"},
      {Frame({.type = kReadErr, .code = 0}), "a read error without a reason"},
  };
  uint64_t n = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(reader->Post(*x).ok()) << c.what;
    FrameHdr req = target.ReadRequest();
    FrameHdr reply{};
    std::memcpy(&reply, c.reply.data(), sizeof(reply));
    reply.token = req.token;
    target.Send(Pod(reply) + c.reply.substr(sizeof(reply)));
    const Status s = reader->Wait(*x, Deadline::AfterMs(5000));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.what << ": " << s;
    EXPECT_EQ(reader->Stats().refused_inbound.at("reply_mismatch"), ++n) << c.what;
  }
  EXPECT_EQ(dst, std::vector<uint8_t>(kBytes, 0)) << "a mismatched reply landed";
}

}  // namespace
}  // namespace kvferry::transfer::sock
