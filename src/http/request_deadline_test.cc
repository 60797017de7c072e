// RequestDeadline behind a real httplib::Server: a client that trickles its headers or its body
// is answered 408 and cut, counted; a request that arrived is never cut however long its
// handler or its streamed answer takes; on a kept-alive connection each request gets its own
// deadline, counted from the previous answer.
#include "kvferry/http/request_deadline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "kvferry/http/connection_threads.h"
#include "kvferry/http/http_listener.h"
#include "testing/raw_client.h"

namespace kvferry::http {
namespace deadline_test {

using std::chrono::milliseconds;
using testing::ConnectLoopback;
using testing::ReadUntilClosed;
using testing::SendAll;

// A server with a thread per connection and the deadline, as both front ends run theirs.
class DeadlineServer {
 public:
  DeadlineServer(milliseconds timeout,
                 const std::function<void(httplib::Server&, RequestDeadline&)>& routes)
      : threads_(std::make_shared<ConnectionThreads>(64)),
        deadline_({.timeout = timeout, .plaintext = true, .scan_interval = milliseconds(50)}) {
    server_.new_task_queue = [t = threads_] { return ConnectionThreads::Handle(t); };
    deadline_.Install(server_);
    routes(server_, deadline_);
    auto port = StartHttpListener(server_, "127.0.0.1", 0, &listener_);
    EXPECT_TRUE(port.ok()) << port.status();
    port_ = port.ok() ? *port : 0;
    threads_->SetListenPort(port_);
    deadline_.Start(port_);
  }
  ~DeadlineServer() {
    server_.stop();
    listener_.join();
    deadline_.Stop();
  }
  int port() const { return port_; }
  const RequestDeadline& deadline() const { return deadline_; }

 private:
  std::shared_ptr<ConnectionThreads> threads_;
  RequestDeadline deadline_;
  httplib::Server server_;
  std::thread listener_;
  int port_ = 0;
};

// On `fd`: sends `head` at once, then `drip` every 50 ms until the server closes the connection;
// returns what the server sent (within 10 s) and whether it closed.
std::string TrickleOn(int fd, const std::string& head, const std::string& drip, bool* closed) {
  SendAll(fd, head);
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    while (!stop && SendAll(fd, drip)) std::this_thread::sleep_for(milliseconds(50));
  });
  std::string got = ReadUntilClosed(fd, milliseconds(10000), closed);
  stop = true;
  dripper.join();
  return got;
}

// The same on a new connection to `port`.
std::string Trickle(int port, const std::string& head, const std::string& drip, bool* closed) {
  const int fd = ConnectLoopback(port);
  EXPECT_GE(fd, 0);
  std::string got = TrickleOn(fd, head, drip, closed);
  ::close(fd);
  return got;
}

TEST(RequestDeadlineTest, TricklingHeadersAreAnswered408AndCut) {
  std::atomic<bool> ran{false};
  DeadlineServer s(milliseconds(300), [&](httplib::Server& http, RequestDeadline& d) {
    http.Post("/x", d.Guard([&](const httplib::Request&, httplib::Response&) { ran = true; }));
  });
  bool closed = false;
  const std::string got =
      Trickle(s.port(), "POST /x HTTP/1.1\r\nHost: x\r\n", "X-Slow: 1\r\n", &closed);
  EXPECT_TRUE(closed) << "still connected 10 s after a 300 ms deadline";
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << got;
  EXPECT_NE(got.find("\"error\""), std::string::npos) << "no OpenAI error body: " << got;
  EXPECT_FALSE(ran);
  EXPECT_EQ(s.deadline().timed_out_total(), 1);
}

TEST(RequestDeadlineTest, ATrickledBodyIsCutBeforeItsHandlerRuns) {
  std::atomic<bool> ran{false};
  DeadlineServer s(milliseconds(300), [&](httplib::Server& http, RequestDeadline& d) {
    http.Post("/x", d.Guard([&](const httplib::Request&, httplib::Response&) { ran = true; }));
  });
  bool closed = false;
  const std::string got = Trickle(
      s.port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "y", &closed);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << got;
  EXPECT_FALSE(ran);
  EXPECT_EQ(s.deadline().timed_out_total(), 1);
}

TEST(RequestDeadlineTest, ASlowHandlerAndALongStreamAreNotCut) {
  DeadlineServer s(milliseconds(300), [](httplib::Server& http, RequestDeadline& d) {
    http.Get("/slow", d.Guard([](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(milliseconds(1000));
      res.set_content("done", "text/plain");
    }));
    http.Get("/stream", d.Guard([](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t, httplib::DataSink& sink) {
        for (int i = 0; i < 10; ++i) {
          std::this_thread::sleep_for(milliseconds(100));
          sink.write("c", 1);
        }
        sink.done();
        return true;
      });
    }));
  });
  httplib::Client client("127.0.0.1", s.port());
  client.set_read_timeout(std::chrono::seconds(10));
  auto slow = client.Get("/slow");
  ASSERT_TRUE(slow) << httplib::to_string(slow.error());
  EXPECT_EQ(slow->body, "done");
  auto stream = client.Get("/stream");
  ASSERT_TRUE(stream) << httplib::to_string(stream.error());
  EXPECT_EQ(stream->body, "cccccccccc");
  EXPECT_EQ(s.deadline().timed_out_total(), 0);
}

TEST(RequestDeadlineTest, EachRequestOnAKeptAliveConnectionHasItsOwnDeadline) {
  DeadlineServer s(milliseconds(1000), [](httplib::Server& http, RequestDeadline& d) {
    http.Get("/ping", d.Guard([](const httplib::Request&, httplib::Response& res) {
      res.set_content("pong", "text/plain");
    }));
  });
  httplib::Client client("127.0.0.1", s.port());
  client.set_keep_alive(true);
  for (int i = 0; i < 4; ++i) {  // 1.2 s on one connection, 0.3 s between requests
    auto res = client.Get("/ping");
    ASSERT_TRUE(res) << "request " << i << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->body, "pong");
    std::this_thread::sleep_for(milliseconds(300));
  }
  EXPECT_EQ(s.deadline().timed_out_total(), 0);
}

// After an answer on a kept-alive connection the clock runs again: a second request trickled
// on the same connection is cut as a first one would be.
TEST(RequestDeadlineTest, ASecondRequestTrickledAfterAnAnswerIsCut) {
  DeadlineServer s(milliseconds(300), [](httplib::Server& http, RequestDeadline& d) {
    http.Get("/ping", d.Guard([](const httplib::Request&, httplib::Response& res) {
      res.set_content("pong", "text/plain");
    }));
  });
  const int fd = ConnectLoopback(s.port());
  ASSERT_GE(fd, 0);
  SendAll(fd, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string first;
  char buf[512];
  while (first.find("pong") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << "no first answer: " << first;
    first.append(buf, static_cast<size_t>(n));
  }
  bool closed = false;
  const std::string got =
      TrickleOn(fd, "GET /ping HTTP/1.1\r\nHost: x\r\n", "X-Slow: 1\r\n", &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(first.starts_with("HTTP/1.1 200 ")) << first;
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << "the second request was not cut: " << got;
  EXPECT_EQ(s.deadline().timed_out_total(), 1);
}

}  // namespace deadline_test
}  // namespace kvferry::http
