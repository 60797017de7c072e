// The handshake side channel: ZeroMQ request/reply between D (client) and P (server).
//
// SideChannelServer: a ROUTER socket bound to tcp://host:port on its own thread. Each request
// frame goes to the handler, whose return value is the reply. Garbage (wrong frame counts, bytes
// the handler rejects) is answered with whatever the handler returns and never stops the server.
//
// FetchOverSideChannel: one REQ round trip with a deadline (connect, send, wait, receive);
// DeadlineExceeded when P does not answer in time, Unavailable for socket errors.
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
#include <string>
#include <string_view>
#include <thread>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"

namespace kvferry::connector::internal {

class SideChannelServer {
 public:
  using Handler = std::function<std::string(std::string_view request)>;

  // Binds and starts serving. port 0: an ephemeral port (see port()). host "0.0.0.0" or "*":
  // all interfaces. Unavailable when the address cannot be bound.
  static StatusOr<std::unique_ptr<SideChannelServer>> Start(const std::string& host, int32_t port,
                                                            Handler handler);
  ~SideChannelServer();  // Stop()
  SideChannelServer(const SideChannelServer&) = delete;
  SideChannelServer& operator=(const SideChannelServer&) = delete;

  int32_t port() const { return port_; }
  uint64_t requests_served() const { return served_.load(); }
  // Stops the thread (within ~20 ms) and closes the socket. Idempotent.
  void Stop();

 private:
  struct Sockets;
  SideChannelServer(std::unique_ptr<Sockets> sockets, int32_t port, Handler handler);
  void Run();

  std::unique_ptr<Sockets> sockets_;
  int32_t port_ = 0;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> served_{0};
  std::thread thread_;
};

StatusOr<std::string> FetchOverSideChannel(const std::string& host, int32_t port,
                                           std::string_view request, Deadline deadline);

}  // namespace kvferry::connector::internal
