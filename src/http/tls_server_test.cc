// MakeHttpServer: a TLS listener answers a client that trusts its CA (plain and streamed
// answers), and refuses a plain-HTTP client and a client without the CA. Certificates are made
// per run by tests/deploy/make_test_pki.sh with the openssl CLI.
#include "kvferry/http/tls_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "http/testing/listen_socket.h"
#include "http/testing/test_server.h"
#include "kvferry/http/http_listener.h"

namespace kvferry::http {
namespace {

class TlsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvf-pki-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    const std::string cmd = std::string("bash ") + KVF_TEST_PKI_SCRIPT + " " + dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string File(const char* name) { return dir_ + "/" + name; }

  void Serve(TlsServerFiles files) {
    auto server = MakeHttpServer(files);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ =
        std::make_unique<testing::TestServer>(std::move(server).value(), [](httplib::Server& http) {
          http.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
            res.set_content("models", "text/plain");
          });
          http.Get("/stream", [](const httplib::Request&, httplib::Response& res) {
            auto n = std::make_shared<int>(0);
            res.set_chunked_content_provider(
                "text/event-stream", [n](size_t, httplib::DataSink& sink) {
                  const std::string ev = "data: " + std::to_string((*n)++) + "\n\n";
                  sink.write(ev.data(), ev.size());
                  if (*n == 3) sink.done();
                  return true;
                });
          });
        });
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }

  std::unique_ptr<httplib::SSLClient> TrustingClient() {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port_);
    c->set_ca_cert_path(File("ca.pem"));
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(std::chrono::seconds(10));
    return c;
  }

  static std::string dir_;
  std::unique_ptr<testing::TestServer> server_;  // MakeHttpServer's, started as `serve` starts it
  int port_ = 0;
};
std::string TlsServerTest::dir_;

TEST_F(TlsServerTest, ClientWithTheCaGetsPlainAndStreamedAnswers) {
  Serve({File("server.pem"), File("server.key")});
  auto c = TrustingClient();
  auto r = c->Get("/v1/models");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "models");
  std::vector<std::string> chunks;
  auto s = c->Get("/stream", [&](const char* data, size_t n) {
    chunks.emplace_back(data, n);
    return true;
  });
  ASSERT_TRUE(s) << httplib::to_string(s.error());
  std::string all;
  for (const std::string& ch : chunks) all += ch;
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
}

TEST_F(TlsServerTest, PlainHttpClientIsRefused) {
  Serve({File("server.pem"), File("server.key")});
  httplib::Client plain("127.0.0.1", port_);
  plain.set_read_timeout(std::chrono::seconds(10));
  auto r = plain.Get("/v1/models");
  EXPECT_FALSE(r && r->status == 200);
  // The server is unharmed: a client with the CA still gets answers.
  auto ok = TrustingClient()->Get("/v1/models");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(TlsServerTest, ClientWithoutTheCaRefusesTheServer) {
  Serve({File("server.pem"), File("server.key")});
  httplib::SSLClient c("127.0.0.1", port_);  // the system's CAs only
  c.enable_server_certificate_verification(true);
  auto r = c.Get("/v1/models");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), httplib::Error::SSLServerVerification);
}

TEST_F(TlsServerTest, ListensAsThePlainServerDoes) {
  // Same StartHttpListener: the raised backlog, and a port in use refused (SO_REUSEADDR, not
  // httplib's SO_REUSEPORT).
  Serve({File("server.pem"), File("server.key")});
  EXPECT_EQ(testing::ListenBacklogOfPort(port_), std::min(1024, testing::SomaxConn()));
  auto again = MakeHttpServer({File("server.pem"), File("server.key")});
  ASSERT_TRUE(again.ok());
  std::thread second;
  EXPECT_EQ(StartHttpListener(**again, "127.0.0.1", port_, &second).status().code(),
            StatusCode::kUnavailable);
  EXPECT_FALSE(second.joinable());
}

TEST_F(TlsServerTest, BadFilesAreRefusedNamingTheFlag) {
  struct Case {
    TlsServerFiles files;
    const char* names;
  };
  const Case cases[] = {
      {{File("server.pem"), ""}, "--ssl-keyfile"},
      {{"", File("server.key")}, "--ssl-certfile"},
      {{File("missing.pem"), File("server.key")}, "--ssl-certfile"},
      {{File("server.pem"), File("missing.key")}, "--ssl-keyfile"},
      {{File("server.pem"), File("other.key")}, "mismatch"},
      {{File("server.key"), File("server.key")}, "--ssl-certfile"},
      {{File("server.pem"), File("encrypted.key")}, "--ssl-keyfile"},  // no terminal prompt
  };
  for (const Case& c : cases) {
    auto server = MakeHttpServer(c.files);
    ASSERT_FALSE(server.ok()) << c.names;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find(c.names), std::string_view::npos) << server.status();
  }
  auto plain = MakeHttpServer({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(dynamic_cast<httplib::SSLServer*>(plain->get()), nullptr);
}

}  // namespace
}  // namespace kvferry::http
