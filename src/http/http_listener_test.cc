// StartHttpListener: a port in use is refused (no silent SO_REUSEPORT sharing), and the listen
// backlog is raised above httplib's built-in 5.
#include "kvferry/http/http_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "http/testing/listen_socket.h"

namespace kvferry::http {
namespace {

using testing::ListenBacklogOfPort;
using testing::SomaxConn;

TEST(HttpListenerTest, PortInUseIsRefused) {
  httplib::Server a;
  httplib::Server b;
  std::thread ta;
  std::thread tb;
  auto port = StartHttpListener(a, "127.0.0.1", 0, &ta);
  ASSERT_TRUE(port.ok()) << port.status();
  auto again = StartHttpListener(b, "127.0.0.1", *port, &tb);
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable) << again.status();
  EXPECT_FALSE(tb.joinable());
  a.stop();
  ta.join();
}

TEST(HttpListenerTest, ListenBacklogIsRaisedAboveHttplibsFive) {
  // httplib 0.11 listens with a backlog of 5: a burst of 64 clients overflows it and some are
  // reset after sending their request (the load test's failure). The listener raises it.
  httplib::Server http;
  std::thread thread;
  auto port = StartHttpListener(http, "127.0.0.1", 0, &thread);
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(ListenBacklogOfPort(*port), std::min(1024, SomaxConn()));
  http.stop();
  thread.join();
}

}  // namespace
}  // namespace kvferry::http
