#include "connector/side_channel.h"

#include <fmt/format.h>

#include <cstring>
#include <set>
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
// The first round trip's share of the deadline; each retry waits one share longer.
constexpr int64_t kAttemptMs = 500;

StatusOr<std::string> DecodeKey(const std::string& z85, std::string_view what) {
  std::string raw(32, '\0');
  if (z85.size() != 40 ||
      zmq_z85_decode(reinterpret_cast<uint8_t*>(raw.data()), z85.c_str()) == nullptr) {
    return InvalidArgumentError(fmt::format("side channel: {} is not a Z85 CURVE key", what));
  }
  return raw;
}

}  // namespace

struct SideChannelServer::Sockets {
  zmq::context_t context{1};
  zmq::socket_t zap{context, zmq::socket_type::rep};  // bound only with CURVE
  zmq::socket_t socket{context, zmq::socket_type::router};
  bool curve = false;
  std::set<std::string> client_keys;  // 32-byte public keys of the admitted Ds

  // CURVE server with a ZAP handler. ZeroMQ asks the handler at inproc://zeromq.zap.01 of the
  // socket's context about every handshake, so it is bound before the ROUTER accepts any.
  Status UseCurve(const CurveServerKeys& keys) {
    if (zmq_has("curve") == 0) {
      return UnimplementedError("side channel: this libzmq was built without CURVE");
    }
    KVF_RETURN_IF_ERROR(DecodeKey(keys.secret_key, "the secret key").status());
    if (keys.client_keys.empty()) {
      return InvalidArgumentError("side channel: CURVE without any client key admits nobody");
    }
    for (const std::string& k : keys.client_keys) {
      KVF_ASSIGN_OR_RETURN(std::string raw, DecodeKey(k, "a client key"));
      client_keys.insert(std::move(raw));
    }
    zap.set(zmq::sockopt::linger, 0);
    zap.bind("inproc://zeromq.zap.01");
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    socket.set(zmq::sockopt::zap_domain, "kvferry");
    curve = true;
    return Status::Ok();
  }
};

StatusOr<std::unique_ptr<SideChannelServer>> SideChannelServer::Start(
    const std::string& host, int32_t port, Handler handler,
    const std::optional<CurveServerKeys>& curve) {
  auto sockets = std::make_unique<Sockets>();
  int32_t bound_port = 0;
  try {
    if (curve) KVF_RETURN_IF_ERROR(sockets->UseCurve(*curve));
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
  while (!stop_.load()) {
    try {
      zmq::pollitem_t items[2] = {{sockets_->socket.handle(), 0, ZMQ_POLLIN, 0},
                                  {sockets_->zap.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, sockets_->curve ? 2 : 1, std::chrono::milliseconds(kPollMs));
      if ((items[1].revents & ZMQ_POLLIN) != 0) AnswerZap();
      if ((items[0].revents & ZMQ_POLLIN) != 0) ServeRequest();
    } catch (const zmq::error_t& e) {
      KVF_LOG_WARN("{}", FromZmq(e, "serve").ToString());
    }
  }
}

void SideChannelServer::AnswerZap() {
  // ZAP request (ZeroMQ RFC 27): version, request id, domain, address, routing id, mechanism,
  // then the mechanism's credentials: for CURVE, the client's 32-byte public key.
  zmq::socket_t& zap = sockets_->zap;
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t msg;
    if (!zap.recv(msg, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(msg));
  } while (zap.get(zmq::sockopt::rcvmore) && frames.size() < 16);
  const bool admitted = frames.size() == 7 && frames[5].to_string_view() == "CURVE" &&
                        sockets_->client_keys.count(frames[6].to_string()) != 0;
  if (!admitted) {
    refused_.fetch_add(1);
    KVF_LOG_WARN("side channel: refused a CURVE client whose key is not listed (from {})",
                 frames.size() > 3 ? frames[3].to_string() : std::string("?"));
  }
  const std::string request_id = frames.size() > 1 ? frames[1].to_string() : std::string();
  zap.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(std::string(admitted ? "200" : "400")), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(std::string(admitted ? "OK" : "client key not listed")),
           zmq::send_flags::sndmore);
  zap.send(zmq::str_buffer(""), zmq::send_flags::sndmore);  // user id
  zap.send(zmq::str_buffer(""), zmq::send_flags::none);     // metadata
}

void SideChannelServer::ServeRequest() {
  zmq::socket_t& sock = sockets_->socket;
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
  if (frames.size() < 2) return;  // no routing identity: nothing to answer
  std::string reply = handler_(frames.back().to_string_view());
  sock.send(frames.front(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (frames.size() >= 3 && frames[1].size() == 0) {
    sock.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  }
  sock.send(zmq::buffer(reply), zmq::send_flags::dontwait);
  served_.fetch_add(1);
}

namespace {

// A handshake failure seen on the client socket's monitor, as the Status the fetch fails with;
// OK for any other event.
Status HandshakeEventStatus(uint16_t event, uint32_t value, const std::string& where) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return UnauthenticatedError(fmt::format(
          "side channel {}: CURVE handshake refused: P does not list this instance's key (ZAP "
          "status {}; add it to P's curve_client_keys_file)",
          where, value));
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return UnauthenticatedError(fmt::format(
          "side channel {}: handshake refused ({}); one side uses CURVE and the other not, or "
          "the keys do not match",
          where,
          value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? "security mechanism mismatch"
                                                              : "protocol error"));
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return UnavailableError(fmt::format(
          "side channel {}: P closed the connection during the handshake ({}); with CURVE, "
          "usually the wrong public key for P, or P expects CURVE and this instance sent "
          "plaintext",
          where, zmq_strerror(static_cast<int>(value))));
    default:
      return Status::Ok();
  }
}

void UseCurveClient(zmq::socket_t& sock, const CurveClientKeys& keys) {
  sock.set(zmq::sockopt::curve_serverkey, keys.server_key);
  sock.set(zmq::sockopt::curve_publickey, keys.public_key);
  sock.set(zmq::sockopt::curve_secretkey, keys.secret_key);
}

// One REQ round trip on a fresh context and socket, within `deadline`.
StatusOr<std::string> FetchOnce(const std::string& host, int32_t port, std::string_view request,
                                Deadline deadline, const std::optional<CurveClientKeys>& curve) {
  const std::string where = fmt::format("{}:{}", host, port);
  try {
    zmq::context_t context(1);
    zmq::socket_t sock(context, zmq::socket_type::req);
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
    int64_t left = deadline.RemainingMs();
    sock.set(zmq::sockopt::sndtimeo, static_cast<int>(std::max<int64_t>(left, 1)));
    if (curve) UseCurveClient(sock, *curve);
    // The monitor reports handshake failures, which ZeroMQ otherwise retries silently.
    constexpr const char* kMonitor = "inproc://side-channel-monitor";
    if (zmq_socket_monitor(sock.handle(), kMonitor,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
      throw zmq::error_t();
    }
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(kMonitor);
    sock.connect(fmt::format("tcp://{}:{}", host, port));
    if (!sock.send(zmq::buffer(request.data(), request.size()))) {
      return DeadlineExceededError(fmt::format("side channel {}: send timed out", where));
    }
    while (true) {
      zmq::pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0},
                                  {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      int64_t wait_ms = std::min<int64_t>(deadline.RemainingMs(), kPollMs);
      zmq::poll(items, 2, std::chrono::milliseconds(wait_ms));
      if (items[1].revents & ZMQ_POLLIN) {
        // Two frames: 6 bytes (uint16 event, uint32 value), then the endpoint.
        zmq::message_t event, endpoint;
        if (monitor.recv(event, zmq::recv_flags::dontwait) && event.size() >= 6) {
          (void)monitor.recv(endpoint, zmq::recv_flags::dontwait);
          uint16_t id = 0;
          uint32_t value = 0;
          std::memcpy(&id, event.data(), sizeof(id));
          std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof(value));
          Status failed = HandshakeEventStatus(id, value, where);
          if (!failed.ok()) return failed;
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t reply;
        if (!sock.recv(reply, zmq::recv_flags::dontwait)) continue;
        return reply.to_string();
      }
      if (deadline.Expired()) {
        return DeadlineExceededError(
            fmt::format("side channel {}: no reply within the handshake deadline", where));
      }
    }
  } catch (const zmq::error_t& e) {
    return FromZmq(e, fmt::format("fetch from {}", where));
  }
}

}  // namespace

StatusOr<std::string> FetchOverSideChannel(const std::string& host, int32_t port,
                                           std::string_view request, Deadline deadline,
                                           const std::optional<CurveClientKeys>& curve) {
  // A round trip that got no reply is tried again on a new socket while the deadline lasts. Seen
  // with vLLM at TP 2: D's first handshake after P's prefill went unanswered for the whole
  // deadline while P's server answered every other client at once; sent again, it was answered
  // (why the first was not is not known: docs/vllm.md). Handshakes and releases are idempotent.
  int attempts = 0;
  while (true) {
    ++attempts;
    const Deadline attempt =
        Deadline::AfterMs(std::min<int64_t>(deadline.RemainingMs(), kAttemptMs * attempts));
    StatusOr<std::string> reply = FetchOnce(host, port, request, attempt, curve);
    if (reply.ok() || reply.status().code() != StatusCode::kDeadlineExceeded) return reply;
    if (deadline.Expired()) {
      return DeadlineExceededError(
          fmt::format("side channel {}:{}: no reply within the handshake deadline ({} attempts)",
                      host, port, attempts));
    }
  }
}

}  // namespace kvferry::connector::internal
