#include "connector/side_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "kvferry/connector/curve_keys.h"

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

// A server that leaves the first request unanswered (a round trip lost on its connection) and
// answers the next: the fetch tries again on a new socket within its deadline and gets the reply.
TEST(SideChannelTest, ARequestLeftUnansweredIsSentAgainWithinTheDeadline) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::rcvtimeo, 10000);  // the server thread ends even if no retry comes
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const int32_t port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  std::atomic<int> seen{0};
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      std::vector<zmq::message_t> frames;  // identity, empty delimiter, payload
      for (int f = 0; f < 3; ++f) {
        zmq::message_t m;
        if (!router.recv(m)) return;
        frames.push_back(std::move(m));
      }
      if (seen.fetch_add(1) == 0) continue;  // the first request is dropped
      router.send(frames[0], zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::sndmore);
      router.send(zmq::str_buffer("second"), zmq::send_flags::none);
    }
  });
  auto reply = FetchOverSideChannel("127.0.0.1", port, "hi", Deadline::AfterMs(5000));
  server.join();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "second");
  EXPECT_EQ(seen.load(), 2);
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

// CURVE: P (server) admits only listed client keys; every refusal happens in the ZMTP handshake,
// so the handler never sees a byte, and the client learns of it from its socket's handshake
// events instead of waiting for its deadline (a refusal that only timed out would be
// DeadlineExceeded, which these tests reject).
class CurveSideChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CurveAvailable());
    for (CurveKeyPair* k : {&p_, &d_, &stranger_}) {
      auto pair = GenerateCurveKeyPair();
      ASSERT_TRUE(pair.ok());
      *k = *pair;
    }
    auto server = SideChannelServer::Start(
        "127.0.0.1", 0,
        [this](std::string_view req) {
          handled_.fetch_add(1);
          return "meta:" + std::string(req);
        },
        CurveServerKeys{p_.secret_key, {d_.public_key}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  StatusOr<std::string> Fetch(const std::optional<CurveClientKeys>& keys) {
    return FetchOverSideChannel("127.0.0.1", server_->port(), "get", Deadline::AfterMs(20000),
                                keys);
  }

  CurveKeyPair p_, d_, stranger_;
  std::atomic<int> handled_{0};
  std::unique_ptr<SideChannelServer> server_;
};

TEST_F(CurveSideChannelTest, ListedClientGetsAnswers) {
  auto reply = Fetch(CurveClientKeys{d_.public_key, d_.secret_key, p_.public_key});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "meta:get");
  EXPECT_EQ(handled_.load(), 1);
  EXPECT_EQ(server_->clients_refused(), 0u);
}

TEST_F(CurveSideChannelTest, UnknownClientKeyIsRefusedBeforeTheHandler) {
  auto reply = Fetch(CurveClientKeys{stranger_.public_key, stranger_.secret_key, p_.public_key});
  EXPECT_EQ(reply.status().code(), StatusCode::kUnauthenticated) << reply.status();
  EXPECT_NE(reply.status().message().find("refused"), std::string_view::npos);
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_GE(server_->clients_refused(), 1u);
}

TEST_F(CurveSideChannelTest, WrongServerKeyIsRefusedBeforeTheHandler) {
  // D encrypts to a key that is not P's: P cannot read D's hello and drops the connection.
  auto reply = Fetch(CurveClientKeys{d_.public_key, d_.secret_key, stranger_.public_key});
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(CurveSideChannelTest, PlaintextClientIsRefusedBeforeTheHandler) {
  auto reply = Fetch(std::nullopt);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(CurveSideChannelTest, CurveClientRefusesAPlaintextServer) {
  std::atomic<int> plain_handled{0};
  auto plain = SideChannelServer::Start("127.0.0.1", 0, [&](std::string_view) {
    plain_handled.fetch_add(1);
    return std::string("meta");
  });
  ASSERT_TRUE(plain.ok());
  auto reply = FetchOverSideChannel("127.0.0.1", (*plain)->port(), "get", Deadline::AfterMs(20000),
                                    CurveClientKeys{d_.public_key, d_.secret_key, p_.public_key});
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status();
  EXPECT_EQ(plain_handled.load(), 0);
}

TEST(SideChannelCurveConfigTest, ServerRefusesBadKeys) {
  auto p = GenerateCurveKeyPair();
  ASSERT_TRUE(p.ok());
  auto handler = [](std::string_view) { return std::string(); };
  EXPECT_EQ(SideChannelServer::Start("127.0.0.1", 0, handler, CurveServerKeys{p->secret_key, {}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SideChannelServer::Start("127.0.0.1", 0, handler,
                                     CurveServerKeys{"not-a-key", {p->public_key}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::connector::internal
