#include "kv_events/endpoint.h"

#include <fmt/format.h>

#include <charconv>

namespace kvferry::kv_events {

Status CheckEndpoint(std::string_view endpoint, std::string_view what) {
  constexpr std::string_view kScheme = "tcp://";
  const size_t colon = endpoint.rfind(':');
  int port = -1;
  if (endpoint.substr(0, kScheme.size()) == kScheme && colon != std::string_view::npos &&
      colon > kScheme.size()) {
    std::string_view digits = endpoint.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc() || end != digits.data() + digits.size()) port = -1;
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(
        fmt::format("{}: endpoint '{}' is not tcp://HOST:PORT", what, endpoint));
  }
  return Status::Ok();
}

StatusOr<std::string> BindEndpoint(zmq::socket_t& socket, const std::string& endpoint,
                                   std::string_view what) {
  KVF_RETURN_IF_ERROR(CheckEndpoint(endpoint, what));
  std::string address = endpoint;
  if (address.size() > 2 && address.compare(address.size() - 2, 2, ":0") == 0) {
    address.replace(address.size() - 1, 1, "*");
  }
  try {
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(address);
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return UnavailableError(
        fmt::format("{}: cannot bind {}: {} (zmq errno {})", what, endpoint, e.what(), e.num()));
  }
}

std::vector<zmq::message_t> RecvFrames(zmq::socket_t& socket, size_t max) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t msg;
    if (!socket.recv(msg, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(msg));
  } while (socket.get(zmq::sockopt::rcvmore) && frames.size() < max);
  while (!frames.empty() && socket.get(zmq::sockopt::rcvmore)) {  // drain an oversized message
    zmq::message_t rest;
    if (!socket.recv(rest, zmq::recv_flags::dontwait)) break;
  }
  return frames;
}

}  // namespace kvferry::kv_events
