// Registrar: keeps one serving instance registered in the cluster registry (etcd) while it runs
// (docs/deploy.md, "Running a cluster").
//
// A background thread grants an etcd lease of `ttl_s`, creates <prefix>members/<id> = the
// member's JSON (member.h) attached to it, and keeps the lease alive every ttl_s / 3. If the
// instance dies or is cut off, keep-alives stop and etcd deletes the key when the lease runs
// out; Stop() revokes the lease, which deletes the key at once. When etcd is unreachable the
// thread retries (every second) and, once etcd is back, keeps the same lease if etcd still has
// it or registers anew. A key that another lease holds (the same id registered by another live
// instance, or by this one before a crash, until that lease runs out) is not overwritten: the
// thread logs it and retries.
//
// Thread-safety: registered() may be called from any thread; Stop() from one controlling
// thread (the destructor calls it).
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "kvferry/cluster/member.h"
#include "kvferry/cluster/registry_address.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::cluster {

class EtcdClient;

struct RegistrarOptions {
  RegistryAddress address;
  int64_t ttl_s = 10;
  int64_t call_timeout_ms = 2000;
  int64_t retry_interval_ms = 1000;
};

class Registrar {
 public:
  // InvalidArgument for a TTL under 2 s (etcd's minimum) or an empty member id; the thread
  // starts registering at once and does not wait for etcd.
  static StatusOr<std::unique_ptr<Registrar>> Start(RegistrarOptions options, MemberInfo member);
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Whether the last call to etcd found the key registered under this instance's lease.
  bool registered() const;
  std::string key() const { return key_; }

  // Stops keeping the lease alive and revokes it (the key is deleted at once), waiting up to
  // the call timeout for etcd.
  void Stop();

 private:
  Registrar(RegistrarOptions options, MemberInfo member);
  void Run();
  // One step of the loop: register when not registered, else keep the lease alive. Returns the
  // milliseconds to wait before the next step.
  int64_t Step();

  const RegistrarOptions options_;
  const MemberInfo member_;
  const std::string key_;
  const std::string value_;
  std::unique_ptr<EtcdClient> etcd_;
  int64_t lease_ = 0;             // the thread's (and Stop's after the join)
  bool logged_conflict_ = false;  // the thread's
  bool logged_unreachable_ = false;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool registered_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvferry::cluster
