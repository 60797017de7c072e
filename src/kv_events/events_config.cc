#include "kvferry/kv_events/events_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kv_events/endpoint.h"

namespace kvferry::kv_events {
namespace {

Status BadConfig(std::string_view field, std::string_view what) {
  return InvalidArgumentError(fmt::format("--kv-events-config: {} {}", field, what));
}

StatusOr<int64_t> PositiveInt(const nlohmann::json& v, std::string_view field) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 31)) {
    return BadConfig(field, "must be a positive integer");
  }
  return v.get<int64_t>();
}

StatusOr<std::string> String(const nlohmann::json& v, std::string_view field) {
  if (!v.is_string()) return BadConfig(field, "must be a string");
  return v.get<std::string>();
}

}  // namespace

StatusOr<std::optional<PublisherOptions>> ParseKvEventsConfig(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return BadConfig("value", "is not a JSON object");
  PublisherOptions o;
  o.endpoint = "tcp://*:5557";
  bool enabled = false;
  std::string publisher = "zmq";
  for (const auto& [key, v] : j.items()) {
    if (key == "enable_kv_cache_events") {
      if (!v.is_boolean()) return BadConfig(key, "must be true or false");
      enabled = v.get<bool>();
    } else if (key == "publisher") {
      if (v.is_null()) continue;
      KVF_ASSIGN_OR_RETURN(publisher, String(v, key));
      if (publisher != "zmq" && publisher != "null")
        return BadConfig(key, "must be \"zmq\" or \"null\"");
    } else if (key == "endpoint") {
      KVF_ASSIGN_OR_RETURN(o.endpoint, String(v, key));
    } else if (key == "replay_endpoint") {
      if (v.is_null()) continue;
      KVF_ASSIGN_OR_RETURN(o.replay_endpoint, String(v, key));
    } else if (key == "topic") {
      KVF_ASSIGN_OR_RETURN(o.topic, String(v, key));
    } else if (key == "buffer_steps") {
      KVF_ASSIGN_OR_RETURN(o.buffer_steps, PositiveInt(v, key));
    } else if (key == "max_queue_size") {
      KVF_ASSIGN_OR_RETURN(o.max_queue, PositiveInt(v, key));
    } else if (key == "hwm") {
      KVF_ASSIGN_OR_RETURN(int64_t hwm, PositiveInt(v, key));
      o.send_hwm = static_cast<int32_t>(hwm);
    } else {
      return BadConfig(key, "is not a field of KVEventsConfig");
    }
  }
  if (!enabled || publisher == "null") return std::optional<PublisherOptions>();
  KVF_RETURN_IF_ERROR(CheckEndpoint(o.endpoint, "--kv-events-config endpoint"));
  if (!o.replay_endpoint.empty()) {
    KVF_RETURN_IF_ERROR(CheckEndpoint(o.replay_endpoint, "--kv-events-config replay_endpoint"));
  }
  return std::optional<PublisherOptions>(std::move(o));
}

}  // namespace kvferry::kv_events
