#include "kvferry/connector/kv_transfer_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "connector/json_fields.h"

namespace kvferry::connector {
namespace {

constexpr int64_t kMaxTimeoutMs = int64_t{1} << 40;

// Which CURVE files go together: key lists without this instance's own key would be ignored,
// and a side-channel server with CURVE but no client key would admit nobody.
Status CheckCurveFields(const KvTransferConfig& c, const JsonFields& top) {
  constexpr std::string_view kNeedsOwnKey = "needs curve_secret_key_file (this instance's key)";
  if (!c.use_curve()) {
    if (!c.curve_client_keys_file.empty()) {
      return top.Error("kv_connector_extra_config.curve_client_keys_file", kNeedsOwnKey);
    }
    if (!c.curve_server_keys_file.empty()) {
      return top.Error("kv_connector_extra_config.curve_server_keys_file", kNeedsOwnKey);
    }
    return Status::Ok();
  }
  if (c.kv_role != KvRole::kConsumer && c.curve_client_keys_file.empty()) {
    return top.Error("kv_connector_extra_config.curve_client_keys_file",
                     fmt::format("{} serves the side channel, and with CURVE it admits only the "
                                 "Ds listed there (or use kv_role kv_consumer)",
                                 KvRoleName(c.kv_role)));
  }
  return Status::Ok();
}

}  // namespace

std::string_view KvRoleName(KvRole role) {
  switch (role) {
    case KvRole::kProducer:
      return "kv_producer";
    case KvRole::kConsumer:
      return "kv_consumer";
    case KvRole::kBoth:
      return "kv_both";
  }
  return "?";
}

std::string_view KvLoadFailurePolicyName(KvLoadFailurePolicy p) {
  return p == KvLoadFailurePolicy::kFail ? "fail" : "recompute";
}

StatusOr<KvTransferConfig> ParseKvTransferConfig(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgumentError("kv-transfer-config must be a JSON object");
  KvTransferConfig c;
  const JsonFields top(j, "kv-transfer-config ");
  KVF_RETURN_IF_ERROR(top.String("kv_connector", &c.kv_connector));
  if (c.kv_connector != "FerryConnector" && c.kv_connector != "NixlConnector") {
    return top.Error("kv_connector",
                     fmt::format("'{}' is not supported (FerryConnector)", c.kv_connector));
  }
  c.kv_connector = "FerryConnector";
  std::string role;
  KVF_RETURN_IF_ERROR(top.String("kv_role", &role));
  if (role.empty() || role == "kv_both") {
    c.kv_role = KvRole::kBoth;
  } else if (role == "kv_producer") {
    c.kv_role = KvRole::kProducer;
  } else if (role == "kv_consumer") {
    c.kv_role = KvRole::kConsumer;
  } else {
    return top.Error("kv_role", fmt::format("'{}' is not kv_producer|kv_consumer|kv_both", role));
  }
  KVF_RETURN_IF_ERROR(top.String("kv_buffer_device", &c.kv_buffer_device));
  if (c.kv_buffer_device.empty()) c.kv_buffer_device = "direct";
  KVF_RETURN_IF_ERROR(top.String("engine_id", &c.engine_id));
  std::string policy;
  KVF_RETURN_IF_ERROR(top.String("kv_load_failure_policy", &policy));
  if (policy.empty() || policy == "recompute") {
    c.kv_load_failure_policy = KvLoadFailurePolicy::kRecompute;
  } else if (policy == "fail") {
    c.kv_load_failure_policy = KvLoadFailurePolicy::kFail;
  } else {
    return top.Error("kv_load_failure_policy", fmt::format("'{}' is not recompute|fail", policy));
  }

  const nlohmann::json* extra = top.Find("kv_connector_extra_config");
  if (extra != nullptr) {
    if (!extra->is_object()) return top.Error("kv_connector_extra_config", "must be an object");
    const JsonFields fields(*extra, "kv-transfer-config ");
    KVF_RETURN_IF_ERROR(fields.String("side_channel_host", &c.side_channel_host));
    int64_t port = c.side_channel_port;
    KVF_RETURN_IF_ERROR(fields.Integer("side_channel_port", 0, 65535, &port));
    c.side_channel_port = static_cast<int32_t>(port);
    KVF_RETURN_IF_ERROR(fields.Integer("lease_ms", 1, kMaxTimeoutMs, &c.lease_ms));
    KVF_RETURN_IF_ERROR(
        fields.Integer("handshake_timeout_ms", 1, kMaxTimeoutMs, &c.handshake_timeout_ms));
    KVF_RETURN_IF_ERROR(
        fields.Integer("transfer_timeout_ms", 1, kMaxTimeoutMs, &c.transfer_timeout_ms));
    std::string backend;
    KVF_RETURN_IF_ERROR(fields.String("backend", &backend));
    if (!backend.empty()) {
      StatusOr<transfer::BackendKind> kind = transfer::ParseBackendKind(backend);
      if (!kind.ok()) {
        return top.Error("kv_connector_extra_config.backend", kind.status().message());
      }
      c.backend = *kind;
    }
    std::string ucx_transport;
    KVF_RETURN_IF_ERROR(fields.String("ucx_transport", &ucx_transport));
    if (!ucx_transport.empty()) {
      StatusOr<transfer::UcxTransport> t = transfer::ParseUcxTransport(ucx_transport);
      if (!t.ok()) {
        return top.Error("kv_connector_extra_config.ucx_transport", t.status().message());
      }
      c.ucx_transport = *t;
    }
    KVF_RETURN_IF_ERROR(fields.Bool("cache_in_agent_memory", &c.cache_in_agent_memory));
    KVF_RETURN_IF_ERROR(fields.String("auth_token", &c.auth_token));
    KVF_RETURN_IF_ERROR(fields.String("curve_secret_key_file", &c.curve_secret_key_file));
    KVF_RETURN_IF_ERROR(fields.String("curve_client_keys_file", &c.curve_client_keys_file));
    KVF_RETURN_IF_ERROR(fields.String("curve_server_keys_file", &c.curve_server_keys_file));
  }
  if (c.side_channel_host.empty()) return top.Error("side_channel_host", "must not be empty");
  KVF_RETURN_IF_ERROR(CheckCurveFields(c, top));
  return c;
}

StatusOr<KvTransferConfig> ParseKvTransferConfig(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("kv-transfer-config is not valid JSON");
  return ParseKvTransferConfig(j);
}

nlohmann::json ToJson(const KvTransferConfig& c) {
  nlohmann::json extra = {
      {"side_channel_host", c.side_channel_host},
      {"side_channel_port", c.side_channel_port},
      {"lease_ms", c.lease_ms},
      {"handshake_timeout_ms", c.handshake_timeout_ms},
      {"transfer_timeout_ms", c.transfer_timeout_ms},
      {"backend", std::string(transfer::BackendKindName(c.backend))},
      {"ucx_transport", std::string(transfer::UcxTransportName(c.ucx_transport))},
      {"cache_in_agent_memory", c.cache_in_agent_memory},
  };
  if (!c.auth_token.empty()) extra["auth_token"] = c.auth_token;
  if (!c.curve_secret_key_file.empty()) extra["curve_secret_key_file"] = c.curve_secret_key_file;
  if (!c.curve_client_keys_file.empty()) {
    extra["curve_client_keys_file"] = c.curve_client_keys_file;
  }
  if (!c.curve_server_keys_file.empty()) {
    extra["curve_server_keys_file"] = c.curve_server_keys_file;
  }
  return nlohmann::json{
      {"kv_connector", c.kv_connector},
      {"kv_role", std::string(KvRoleName(c.kv_role))},
      {"kv_buffer_device", c.kv_buffer_device},
      {"engine_id", c.engine_id},
      {"kv_load_failure_policy", std::string(KvLoadFailurePolicyName(c.kv_load_failure_policy))},
      {"kv_connector_extra_config", std::move(extra)},
  };
}

}  // namespace kvferry::connector
