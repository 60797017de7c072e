// RegistryListener: what the registry watcher tells the table of members (ClusterState): the
// complete set of valid members after each change, whether etcd answers, and each event.
//
// Thread-safety: implementations are called from the watcher's threads and must lock.
#pragma once

#include <string_view>
#include <vector>

#include "kvferry/cluster/member.h"

namespace kvferry::cluster {

class RegistryListener {
 public:
  virtual ~RegistryListener() = default;
  virtual void SetMembers(std::vector<MemberInfo> members) = 0;
  virtual void SetRegistryConnected(bool connected) = 0;
  // kind: "put", "delete", "invalid" (a value that did not decode, ignored).
  virtual void CountRegistryEvent(std::string_view kind) = 0;
};

}  // namespace kvferry::cluster
