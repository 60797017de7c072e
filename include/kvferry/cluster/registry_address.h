// RegistryAddress: where the cluster registry lives, from `--registry etcd://HOST:PORT[,HOST:PORT
// ...][/NAMESPACE]` (docs/deploy.md, "Running a cluster"). Members of one cluster register under
// /kvferry/<NAMESPACE>/members/ (NAMESPACE "default" when omitted); instances and proxies that
// name the same endpoints and namespace form one cluster.
//
// Thread-safety: values and pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::cluster {

struct EtcdEndpoint {
  std::string host;
  int port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  bool operator==(const EtcdEndpoint&) const = default;
};

struct RegistryAddress {
  std::vector<EtcdEndpoint> endpoints;  // at least one
  std::string prefix;                   // "/kvferry/<namespace>/"
  std::string MembersPrefix() const { return prefix + "members/"; }
  std::string ToString() const;  // etcd://h:p,h:p/<namespace>
};

// InvalidArgument naming what is wrong (scheme, a host or port, the namespace's characters:
// letters, digits, '-', '_', '.').
StatusOr<RegistryAddress> ParseRegistryUrl(std::string_view url);

}  // namespace kvferry::cluster
