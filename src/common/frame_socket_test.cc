#include "kvferry/common/frame_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvferry {
namespace {

struct SocketPair {
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  int fd[2] = {-1, -1};
};

TEST(FrameSocketTest, FramesRoundTripInOrder) {
  SocketPair s;
  ASSERT_TRUE(SendFrame(s.fd[0], "first"));
  ASSERT_TRUE(SendFrame(s.fd[0], ""));
  ASSERT_TRUE(SendFrame(s.fd[0], std::string(100000, 'x')));
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(5000)), "first");
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(5000)), "");
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(5000)), std::string(100000, 'x'));
}

TEST(FrameSocketTest, NothingToReadEndsAtTheDeadline) {
  SocketPair s;
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(20)), std::nullopt);
}

TEST(FrameSocketTest, TruncatedFrameAndClosedPeerAreRefused) {
  SocketPair s;
  const uint64_t n = 10;
  ASSERT_TRUE(WriteAll(s.fd[0], &n, sizeof(n)));
  ASSERT_TRUE(WriteAll(s.fd[0], "abc", 3));
  ::close(s.fd[0]);
  s.fd[0] = -1;
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(5000)), std::nullopt);
  EXPECT_FALSE(SendFrame(s.fd[1], "to nobody"));  // no SIGPIPE
}

TEST(FrameSocketTest, OversizedLengthIsRefusedWithoutAllocating) {
  SocketPair s;
  const uint64_t n = kMaxFrameBytes + 1;
  ASSERT_TRUE(WriteAll(s.fd[0], &n, sizeof(n)));
  EXPECT_EQ(RecvFrame(s.fd[1], Deadline::AfterMs(5000)), std::nullopt);
}

}  // namespace
}  // namespace kvferry
