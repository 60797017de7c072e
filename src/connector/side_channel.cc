#include "connector/side_channel.h"

#include <fmt/format.h>

#include <vector>
#include <zmq.hpp>

#include "kvferry/common/logging.h"

namespace kvferry::connector::internal {
namespace {

// The one translation of ZeroMQ errors.
Status FromZmq(const zmq::error_t& e, std::string_view what) {
  return UnavailableError(
      fmt::format("side channel {}: {} (zmq errno {})", what, e.what(), e.num()));
}

std::string BindAddress(const std::string& host, int32_t port) {
  std::string h = (host == "0.0.0.0" || host.empty()) ? "*" : host;
  return port == 0 ? fmt::format("tcp://{}:*", h) : fmt::format("tcp://{}:{}", h, port);
}

constexpr int kPollMs = 20;

}  // namespace

struct SideChannelServer::Sockets {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::router};
};

StatusOr<std::unique_ptr<SideChannelServer>> SideChannelServer::Start(const std::string& host,
                                                                      int32_t port,
                                                                      Handler handler) {
  auto sockets = std::make_unique<Sockets>();
  int32_t bound_port = 0;
  try {
    sockets->socket.set(zmq::sockopt::linger, 0);
    sockets->socket.set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
    sockets->socket.bind(BindAddress(host, port));
    std::string endpoint = sockets->socket.get(zmq::sockopt::last_endpoint);
    bound_port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  } catch (const zmq::error_t& e) {
    return FromZmq(e, fmt::format("bind {}", BindAddress(host, port)));
  }
  std::unique_ptr<SideChannelServer> server(
      new SideChannelServer(std::move(sockets), bound_port, std::move(handler)));
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

SideChannelServer::SideChannelServer(std::unique_ptr<Sockets> sockets, int32_t port,
                                     Handler handler)
    : sockets_(std::move(sockets)), port_(port), handler_(std::move(handler)) {}

SideChannelServer::~SideChannelServer() { Stop(); }

void SideChannelServer::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void SideChannelServer::Run() {
  zmq::socket_t& sock = sockets_->socket;
  while (!stop_.load()) {
    try {
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(kPollMs));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      // ROUTER frames: identity, [empty delimiter from REQ], payload. Anything else is answered
      // with the handler's verdict on the last frame.
      std::vector<zmq::message_t> frames;
      do {
        zmq::message_t msg;
        if (!sock.recv(msg, zmq::recv_flags::dontwait)) break;
        frames.push_back(std::move(msg));
      } while (sock.get(zmq::sockopt::rcvmore) && frames.size() < 16);
      while (sock.get(zmq::sockopt::rcvmore)) {  // drain an oversized multipart
        zmq::message_t junk;
        if (!sock.recv(junk, zmq::recv_flags::dontwait)) break;
      }
      if (frames.size() < 2) continue;  // no routing identity: nothing to answer
      std::string reply = handler_(frames.back().to_string_view());
      sock.send(frames.front(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (frames.size() >= 3 && frames[1].size() == 0) {
        sock.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      }
      sock.send(zmq::buffer(reply), zmq::send_flags::dontwait);
      served_.fetch_add(1);
    } catch (const zmq::error_t& e) {
      KVF_LOG_WARN("{}", FromZmq(e, "serve").ToString());
    }
  }
}

StatusOr<std::string> FetchOverSideChannel(const std::string& host, int32_t port,
                                           std::string_view request, Deadline deadline) {
  try {
    zmq::context_t context(1);
    zmq::socket_t sock(context, zmq::socket_type::req);
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
    int64_t left = deadline.RemainingMs();
    sock.set(zmq::sockopt::sndtimeo, static_cast<int>(std::max<int64_t>(left, 1)));
    sock.connect(fmt::format("tcp://{}:{}", host, port));
    if (!sock.send(zmq::buffer(request.data(), request.size()))) {
      return DeadlineExceededError(fmt::format("side channel {}:{}: send timed out", host, port));
    }
    while (true) {
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      int64_t wait_ms = std::min<int64_t>(deadline.RemainingMs(), kPollMs);
      zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms));
      if (item.revents & ZMQ_POLLIN) {
        zmq::message_t reply;
        if (!sock.recv(reply, zmq::recv_flags::dontwait)) continue;
        return reply.to_string();
      }
      if (deadline.Expired()) {
        return DeadlineExceededError(
            fmt::format("side channel {}:{}: no reply within the handshake deadline", host, port));
      }
    }
  } catch (const zmq::error_t& e) {
    return FromZmq(e, fmt::format("fetch from {}:{}", host, port));
  }
}

}  // namespace kvferry::connector::internal
