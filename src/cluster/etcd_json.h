// What EtcdClient and EtcdWatch share about the JSON gateway's encoding (internal; it includes
// nlohmann/json, so only .cc files of this folder include it).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "cluster/etcd_client.h"

namespace kvferry::cluster {

// A 64-bit field, which the gateway writes as a decimal string (and omits when 0).
int64_t Int64Of(const nlohmann::json& obj, const char* key);

// One mvccpb.KeyValue object, key and value base64-decoded.
StatusOr<EtcdKv> KvOf(const nlohmann::json& kv);

// etcd's error object ({"error", "message", "code": gRPC code}) as a Status.
Status EtcdError(const nlohmann::json& error, std::string_view what);

}  // namespace kvferry::cluster
