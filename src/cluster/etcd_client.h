// EtcdClient: the etcd v3 calls the cluster registry needs, over etcd's JSON gateway (POST
// /v3/...; keys and values base64, 64-bit integers as decimal strings; etcd 3.4 serves it on its
// client URL) with cpp-httplib, the HTTP client kvferry already uses — no gRPC stack.
//
// With several endpoints a call that cannot reach one tries the next, and later calls start
// from the one that answered. Errors are values: Unavailable when no endpoint answered,
// DeadlineExceeded on a timeout, etcd's own errors mapped from their gRPC codes (NotFound for a
// lease etcd no longer has, ...).
//
// Thread-safety: every method may be called from any thread; each call uses its own connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/cluster/registry_address.h"
#include "kvferry/common/status.h"

namespace kvferry::cluster {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store's revision when read: watch from revision + 1
  std::vector<EtcdKv> kvs;
};

class EtcdClient {
 public:
  EtcdClient(std::vector<EtcdEndpoint> endpoints, int64_t call_timeout_ms);

  StatusOr<int64_t> GrantLease(int64_t ttl_s);
  // One keep-alive: the lease's renewed TTL in seconds; NotFound when etcd no longer has it.
  StatusOr<int64_t> KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);  // deletes the keys attached to it at once
  // key = value attached to `lease`, only if the key does not exist (a transaction):
  // AlreadyExists when it does.
  Status Create(const std::string& key, const std::string& value, int64_t lease);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  StatusOr<EtcdRange> RangePrefix(const std::string& prefix);
  // OK when an endpoint reports itself healthy (GET /health).
  Status Health();

  // The endpoint the next call tries first.
  EtcdEndpoint current() const;
  const std::vector<EtcdEndpoint>& endpoints() const { return endpoints_; }

 private:
  StatusOr<std::string> Call(const char* method, const std::string& path, const std::string& body);

  const std::vector<EtcdEndpoint> endpoints_;
  const int64_t call_timeout_ms_;
  std::atomic<size_t> current_{0};
};

// The range_end that makes [prefix, range_end) every key starting with `prefix`.
std::string PrefixEnd(std::string_view prefix);
std::string Base64Encode(std::string_view bytes);
// InvalidArgument on characters outside the standard alphabet or a bad length.
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace kvferry::cluster
