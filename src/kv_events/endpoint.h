// The one check and bind of a KV-event endpoint (tcp://HOST:PORT), for the publisher's sockets,
// and the check the subscriber makes before it connects. ZeroMQ's exceptions become a Status here.
//
// Internal to kv_events. Any thread (each call uses only the socket it is given).
#pragma once

#include <string>
#include <string_view>
#include <zmq.hpp>

#include "kvferry/common/status.h"

namespace kvferry::kv_events {

// InvalidArgument unless `endpoint` is tcp://HOST:PORT with PORT in 0..65535.
Status CheckEndpoint(std::string_view endpoint, std::string_view what);

// Binds `socket` (PORT 0: an ephemeral port) and returns the endpoint as bound. Unavailable when
// the address cannot be bound.
StatusOr<std::string> BindEndpoint(zmq::socket_t& socket, const std::string& endpoint,
                                   std::string_view what);

}  // namespace kvferry::kv_events
