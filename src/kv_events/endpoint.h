// The ZeroMQ plumbing the publisher and the subscriber share: the one check and bind of a
// KV-event endpoint (tcp://HOST:PORT; ZeroMQ's exceptions become a Status here), and reading one
// message's frames.
//
// Internal to kv_events. Any thread (each call uses only the socket it is given).
#pragma once

#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "kvferry/common/status.h"

namespace kvferry::kv_events {

// InvalidArgument unless `endpoint` is tcp://HOST:PORT with PORT in 0..65535.
Status CheckEndpoint(std::string_view endpoint, std::string_view what);

// Binds `socket` (PORT 0: an ephemeral port) and returns the endpoint as bound. Unavailable when
// the address cannot be bound.
StatusOr<std::string> BindEndpoint(zmq::socket_t& socket, const std::string& endpoint,
                                   std::string_view what);

// Up to `max` frames of the next message (the rest of a longer one is read and dropped); empty
// when none is waiting. Throws zmq::error_t as the socket does.
std::vector<zmq::message_t> RecvFrames(zmq::socket_t& socket, size_t max);

}  // namespace kvferry::kv_events
