#include "http/testing/test_server.h"

#include <gtest/gtest.h>

#include "kvferry/http/http_listener.h"

namespace kvferry::http::testing {

TestServer::TestServer(const Routes& routes)
    : TestServer(std::make_unique<httplib::Server>(), routes) {}

TestServer::TestServer(std::unique_ptr<httplib::Server> server, const Routes& routes)
    : server_(std::move(server)) {
  if (routes) routes(*server_);
  auto port = StartHttpListener(*server_, "127.0.0.1", 0, &thread_);
  // A failure here is the test's, not the code's under test: say so, and leave port 0 (which
  // no client reaches).
  if (!port.ok()) {
    ADD_FAILURE() << "test server did not start: " << port.status();
    return;
  }
  port_ = *port;
}

TestServer::~TestServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string TestServer::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

}  // namespace kvferry::http::testing
