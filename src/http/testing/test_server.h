// TestServer (tests only): a cpp-httplib server on a free loopback port, serving on its own
// thread from construction to destruction — the fake upstreams, members and metrics endpoints
// of the http, cluster and proxy tests. It starts with StartHttpListener, as `kvferry serve` and
// `kvferry proxy` start theirs, so a test server listens the way the real ones do.
//
//   http::testing::TestServer p([](httplib::Server& s) {
//     s.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) { ... });
//   });
//   ... p.url() ...
//
// Thread-safety: construct and destroy on one thread; the handlers run on httplib's pool and
// synchronise what they share with the test themselves.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace kvferry::http::testing {

class TestServer {
 public:
  // Registers the handlers on the server; called before the listener starts (httplib's
  // handler tables must not change while it serves).
  using Routes = std::function<void(httplib::Server&)>;

  explicit TestServer(const Routes& routes = {});  // none: 404 for every path
  // The same around `server` (e.g. the TLS server MakeHttpServer made).
  TestServer(std::unique_ptr<httplib::Server> server, const Routes& routes);
  ~TestServer();  // stops serving and joins the thread
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  int port() const { return port_; }              // 0 when the listener did not start
  std::string url() const;                        // "http://127.0.0.1:<port>"
  httplib::Server& server() { return *server_; }  // e.g. to stop it early

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kvferry::http::testing
