// KvTransferConfig: the `--kv-transfer-config` JSON of a kvferry instance, with vLLM's field
// names (docs/connector.md):
//
//   {"kv_connector": "FerryConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu",
//    "engine_id": "prefill-0", "kv_load_failure_policy": "recompute",
//    "kv_connector_extra_config": {"side_channel_host": "127.0.0.1", "side_channel_port": 5600,
//        "lease_ms": 30000, "handshake_timeout_ms": 5000, "transfer_timeout_ms": 30000,
//        "backend": "ucx", "ucx_transport": "auto", "auth_token": "...", "curve_secret_key_file":
//        "/etc/kvferry/p0.key", "curve_client_keys_file": "/etc/kvferry/clients",
//        "curve_server_keys_file": "..."}}
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::connector {

// kv_producer: only prefills for remote readers; kv_consumer: only pulls; kv_both: either, the
// per-request kv_transfer_params decide (as in vLLM, the proxy chooses the role).
enum class KvRole : uint8_t { kProducer, kConsumer, kBoth };

std::string_view KvRoleName(KvRole role);                         // "kv_producer" ...
std::string_view KvLoadFailurePolicyName(KvLoadFailurePolicy p);  // "recompute" | "fail"

struct KvTransferConfig {
  std::string kv_connector = "FerryConnector";
  KvRole kv_role = KvRole::kBoth;
  // "cpu": the KV cache is not registered with the transport; P stages every computed chunk
  // into a registered host buffer and D reads into a registered host buffer and copies into its
  // cache. Anything else ("cuda", "direct", empty): the cache itself is registered.
  std::string kv_buffer_device = "direct";
  std::string engine_id;  // empty: CreateFerryConnector makes a unique one
  KvLoadFailurePolicy kv_load_failure_policy = KvLoadFailurePolicy::kRecompute;

  // kv_connector_extra_config
  std::string side_channel_host = "127.0.0.1";
  int32_t side_channel_port = 0;  // 0: an ephemeral port, see FerryConnector::side_channel_port()
  int64_t lease_ms = 30000;       // P frees held blocks after this if D never notified
  int64_t handshake_timeout_ms = 5000;
  int64_t transfer_timeout_ms = 30000;                          // one pull, from post to completion
  transfer::BackendKind backend = transfer::BackendKind::kUcx;  // the agent's data plane
  // With backend ucx, which transports the agent's UCX context may use ("auto", "tcp", "shm";
  // UCX_TLS in the environment wins).
  transfer::UcxTransport ucx_transport = transfer::UcxTransport::kAuto;
  // Direct mode: the KV cache is allocated by the transfer agent, so a same-host peer maps it
  // and a pull is one memcpy (docs/connector.md, "One-copy pulls"). false: from the heap, as
  // user memory the transport registers (two copies over UCX shared memory); for comparison,
  // or for hosts whose shared memory is too small for the cache.
  bool cache_in_agent_memory = true;
  // When set, the side channel answers only requests carrying it. Sent in plaintext unless
  // CURVE is on, so without CURVE it may only be used on loopback (docs/deploy.md).
  std::string auth_token;
  // CURVE on the side channel (docs/deploy.md, "Side-channel keys"), on when
  // curve_secret_key_file is set: this instance's secret key. An instance that serves the side
  // channel (kv_producer, kv_both) also needs curve_client_keys_file, the public keys of the Ds
  // it answers; one that pulls reads the Ps' public keys from curve_server_keys_file (lines
  // `ENGINE_ID KEY`, or `KEY` for any engine) and refuses to talk to a P it has no key for.
  std::string curve_secret_key_file;
  std::string curve_client_keys_file;
  std::string curve_server_keys_file;

  bool use_host_buffer() const { return kv_buffer_device == "cpu"; }
  bool use_curve() const { return !curve_secret_key_file.empty(); }

  friend bool operator==(const KvTransferConfig&, const KvTransferConfig&) = default;
};

// Parses the JSON object. Unknown keys are ignored (vLLM configs carry more); a kv_connector
// other than "FerryConnector" (or "NixlConnector", accepted as an alias), wrong types, unknown
// enum names, ports outside [0, 65535], non-positive timeouts, CURVE key files without
// curve_secret_key_file and a serving role with CURVE but no curve_client_keys_file are
// InvalidArgument naming the field. Key files are read when the connector is created.
StatusOr<KvTransferConfig> ParseKvTransferConfig(const nlohmann::json& j);
// Same, from the command-line string.
StatusOr<KvTransferConfig> ParseKvTransferConfig(std::string_view json_text);
inline StatusOr<KvTransferConfig> ParseKvTransferConfig(const char* json_text) {
  return ParseKvTransferConfig(std::string_view(json_text));
}
// (A std::string would otherwise match the json overload too, where nlohmann/json is complete.)
inline StatusOr<KvTransferConfig> ParseKvTransferConfig(const std::string& json_text) {
  return ParseKvTransferConfig(std::string_view(json_text));
}

// Round-trips with ParseKvTransferConfig.
nlohmann::json ToJson(const KvTransferConfig& config);

}  // namespace kvferry::connector
