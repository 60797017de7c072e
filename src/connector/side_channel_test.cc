#include "connector/side_channel.h"

#include <gtest/gtest.h>

#include <zmq.hpp>

namespace kvferry::connector::internal {
namespace {

TEST(SideChannelTest, RoundTripOnEphemeralPort) {
  auto server = SideChannelServer::Start(
      "127.0.0.1", 0, [](std::string_view req) { return "echo:" + std::string(req); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  auto reply = FetchOverSideChannel("127.0.0.1", (*server)->port(), "hi", Deadline::AfterMs(5000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "echo:hi");
}

TEST(SideChannelTest, NoServerIsDeadlineExceededInTime) {
  // Bind and close to find a port nobody listens on.
  int32_t port = 0;
  {
    auto s = SideChannelServer::Start("127.0.0.1", 0, [](std::string_view) { return ""; });
    ASSERT_TRUE(s.ok());
    port = (*s)->port();
  }
  auto t0 = std::chrono::steady_clock::now();
  auto reply = FetchOverSideChannel("127.0.0.1", port, "hi", Deadline::AfterMs(300));
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(SideChannelTest, GarbageFromARawSocketDoesNotStopTheServer) {
  auto server = SideChannelServer::Start("127.0.0.1", 0, [](std::string_view req) {
    return req == "ok?" ? std::string("yes") : std::string("error");
  });
  ASSERT_TRUE(server.ok());
  {
    // A DEALER sending multipart junk without the REQ delimiter, and a STREAM socket sending
    // raw bytes that are not ZMTP at all.
    zmq::context_t ctx;
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect("tcp://127.0.0.1:" + std::to_string((*server)->port()));
    dealer.send(zmq::str_buffer("junk1"), zmq::send_flags::sndmore);
    dealer.send(zmq::str_buffer("junk2"));
    zmq::socket_t raw(ctx, zmq::socket_type::stream);
    raw.set(zmq::sockopt::linger, 0);
    raw.connect("tcp://127.0.0.1:" + std::to_string((*server)->port()));
    std::string id = raw.get(zmq::sockopt::routing_id);
    raw.send(zmq::buffer(id), zmq::send_flags::sndmore);
    raw.send(zmq::str_buffer("GET / HTTP/1.0\r\n\r\n\xff\xfe"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto reply = FetchOverSideChannel("127.0.0.1", (*server)->port(), "ok?", Deadline::AfterMs(5000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "yes");
}

}  // namespace
}  // namespace kvferry::connector::internal
