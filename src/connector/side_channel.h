// The handshake side channel: ZeroMQ request/reply between D (client) and P (server).
//
// SideChannelServer: a ROUTER socket bound to tcp://host:port on its own thread. Each request
// frame goes to the handler, whose return value is the reply. Garbage (wrong frame counts, bytes
// the handler rejects) is answered with whatever the handler returns and never stops the server.
//
// FetchOverSideChannel: a REQ round trip with a deadline (connect, send, wait, receive), tried
// again on a new socket while the deadline lasts when no reply came;
// DeadlineExceeded when P does not answer in time, Unavailable for socket errors.
//
// CURVE (docs/deploy.md, "Side-channel keys"): with CurveServerKeys the server speaks only
// CURVE, and its ZAP handler (ZeroMQ's authentication hook, on the server thread) admits only
// the listed client keys; everything else is refused during the ZMTP handshake, before a single
// request reaches the handler. With CurveClientKeys the client encrypts to the server's public
// key and proves its own. The client watches its socket's handshake events, so a refusal (an
// unknown client key, the wrong server key, one side in plaintext) fails at once instead of at
// the deadline: Unauthenticated when P said no or the mechanisms differ, Unavailable when P
// closed the connection during the handshake (what a wrong server key looks like).
//
// ZeroMQ's C++ exceptions are translated into Status here and nowhere else.
//
// Thread-safety: the server's handler runs on the server thread; Start/Stop from one owner
// thread. FetchOverSideChannel may be called from any thread (own context per call).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"

namespace kvferry::connector::internal {

// P's CURVE material: its secret key and the public keys of the Ds it answers (all Z85).
struct CurveServerKeys {
  std::string secret_key;
  std::vector<std::string> client_keys;
};

// D's CURVE material: its own key pair and the public key of the P it talks to (all Z85).
struct CurveClientKeys {
  std::string public_key;
  std::string secret_key;
  std::string server_key;
};

class SideChannelServer {
 public:
  using Handler = std::function<std::string(std::string_view request)>;

  // Binds and starts serving. port 0: an ephemeral port (see port()). host "0.0.0.0" or "*":
  // all interfaces. Unavailable when the address cannot be bound; InvalidArgument for a
  // malformed key, Unimplemented when `curve` is given and libzmq lacks CURVE.
  static StatusOr<std::unique_ptr<SideChannelServer>> Start(
      const std::string& host, int32_t port, Handler handler,
      const std::optional<CurveServerKeys>& curve = std::nullopt);
  ~SideChannelServer();  // Stop()
  SideChannelServer(const SideChannelServer&) = delete;
  SideChannelServer& operator=(const SideChannelServer&) = delete;

  int32_t port() const { return port_; }
  uint64_t requests_served() const { return served_.load(); }
  // CURVE handshakes refused because the client's key is not listed (ZAP said 400).
  uint64_t clients_refused() const { return refused_.load(); }
  // Stops the thread (within ~20 ms) and closes the socket. Idempotent.
  void Stop();

 private:
  struct Sockets;
  SideChannelServer(std::unique_ptr<Sockets> sockets, int32_t port, Handler handler);
  void Run();
  void ServeRequest();
  void AnswerZap();

  std::unique_ptr<Sockets> sockets_;
  int32_t port_ = 0;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

StatusOr<std::string> FetchOverSideChannel(
    const std::string& host, int32_t port, std::string_view request, Deadline deadline,
    const std::optional<CurveClientKeys>& curve = std::nullopt);

}  // namespace kvferry::connector::internal
