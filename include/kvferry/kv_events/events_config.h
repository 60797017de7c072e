// `--kv-events-config`: vLLM's KVEventsConfig as JSON, read into PublisherOptions
// (docs/kv_events.md). The fields are vLLM's:
//   enable_kv_cache_events (bool, default false), publisher ("zmq" | "null"; default "zmq" when
//   enabled), endpoint (default "tcp://*:5557"), replay_endpoint (default none), buffer_steps
//   (10000), hwm (100000), max_queue_size (100000), topic ("").
// Events are published when enable_kv_cache_events is true and the publisher is "zmq".
// InvalidArgument naming the field for anything else: not JSON, an unknown field, a wrong type,
// a non-positive size, an endpoint that is not tcp://HOST:PORT.
//
// Pure function; any thread.
#pragma once

#include <optional>
#include <string_view>

#include "kvferry/common/status.h"
#include "kvferry/kv_events/publisher.h"

namespace kvferry::kv_events {

// nullopt: events off.
StatusOr<std::optional<PublisherOptions>> ParseKvEventsConfig(std::string_view json);

}  // namespace kvferry::kv_events
