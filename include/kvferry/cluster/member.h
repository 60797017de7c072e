// MemberInfo: what one serving instance publishes about itself in the cluster registry (etcd),
// and the one JSON encoding of it (docs/deploy.md, "Running a cluster").
//
// The value under <prefix>members/<id> is a JSON object, version 1:
//   {"version":1, "role":"prefill"|"decode"|"both", "url":"http://10.0.0.2:8100",
//    "engine_id":"p0", "side_channel":"10.0.0.2:5600", "model":"tiny", "tp_size":1,
//    "kv_blocks_total":4096, "block_size":16,
//    "kv_events":"tcp://10.0.0.2:5557", "kv_events_replay":"tcp://10.0.0.2:5558",
//    "prefix_hash_salt":"9f2c0e11d3a4b5c6"}
// The last three are optional (an instance without KV events leaves them out; the salt is the
// root of its prefix cache's chain hashes, in hex; docs/kv_events.md).
// Unknown keys are ignored (a newer instance may add some); a missing or ill-typed key, an
// unknown role or a URL that is not http(s)://host:port makes the whole value invalid, and the
// proxy ignores it with a log line rather than routing to half a member.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::cluster {

enum class MemberRole : uint8_t { kPrefill, kDecode, kBoth };

std::string_view MemberRoleName(MemberRole role);                // "prefill", "decode", "both"
StatusOr<MemberRole> MemberRoleFromName(std::string_view name);  // and back
// vLLM's kv_role: kv_producer -> kPrefill, kv_consumer -> kDecode, kv_both -> kBoth.
StatusOr<MemberRole> MemberRoleFromKvRole(std::string_view kv_role);
inline bool CanPrefill(MemberRole r) { return r != MemberRole::kDecode; }
inline bool CanDecode(MemberRole r) { return r != MemberRole::kPrefill; }

struct MemberInfo {
  std::string id;  // the registry key's last segment (the engine id); a static member: its URL
  MemberRole role = MemberRole::kBoth;
  std::string url;           // http(s)://host:port, where proxies send requests
  std::string engine_id;     // the connector's engine id (remote_engine_id in kv_transfer_params)
  std::string side_channel;  // host:port of P's handshake socket; "" when it serves none
  std::string model;
  int32_t tp_size = 1;
  int64_t kv_blocks_total = 0;   // logical blocks of the KV pool
  int32_t block_size = 0;        // logical block size in tokens
  std::string kv_events;         // tcp://host:port of its KV-event PUB socket; "" none
  std::string kv_events_replay;  // tcp://host:port of its replay socket; "" none
  uint64_t prefix_hash_salt = 0;
  // Its connector's kv_role ("kv_producer", "kv_consumer", "kv_both"; "" not told): whether it
  // can lend KV (not a consumer) and load it (not a producer). A member registered as prefill
  // with kv_both can pull a prefix from another member (docs/deploy.md, "Prefix pulls").
  std::string kv_role;

  bool operator==(const MemberInfo&) const = default;
};

// "http://host:port" or "https://host:port" (no path, port 1..65535): InvalidArgument
// otherwise. Whether https is reachable is the transport's business (the proxy's), not the
// registry's.
Status ValidateHttpUrl(std::string_view url);

std::string EncodeMember(const MemberInfo& member);
// `id` is the key's last segment; InvalidArgument naming the first bad field.
StatusOr<MemberInfo> DecodeMember(std::string_view id, std::string_view json);

}  // namespace kvferry::cluster
