// RegistryWatcher: follows the cluster's members in etcd for a proxy (docs/deploy.md, "Running a
// cluster").
//
// A background thread lists <prefix>members/ and watches it from the listed revision on; after
// every change it hands the listener the complete set of valid members. A value that does not
// decode (member.h) is ignored with one log line per value, and counted. Every
// `health_interval_ms` the thread asks etcd for its health; when etcd does not answer (stopped,
// cut off) or the watch ends, the listener hears "disconnected" — it keeps routing to the last
// known members — and the thread lists and watches again every `retry_interval_ms` until etcd
// answers. Listing again on reconnect also catches what changed while etcd was away.
//
// Thread-safety: Start/Stop from one controlling thread; the listener is called from the
// watcher's threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/etcd_watch.h"
#include "cluster/registry_listener.h"
#include "kvferry/cluster/registry_address.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::cluster {

struct RegistryWatcherOptions {
  RegistryAddress address;
  int64_t call_timeout_ms = 1000;
  int64_t health_interval_ms = 1000;
  int64_t retry_interval_ms = 1000;
};

class RegistryWatcher {
 public:
  // `listener` must outlive the watcher.
  static std::unique_ptr<RegistryWatcher> Start(RegistryWatcherOptions options,
                                                RegistryListener* listener);
  ~RegistryWatcher();
  RegistryWatcher(const RegistryWatcher&) = delete;
  RegistryWatcher& operator=(const RegistryWatcher&) = delete;

  void Stop();

 private:
  RegistryWatcher(RegistryWatcherOptions options, RegistryListener* listener);
  void Run();
  // Lists and watches until the watch ends, etcd stops answering, or Stop(); the reason.
  // `connected`: set once the listing succeeded.
  Status Session(bool* connected);
  // Applies one put or delete to members_ (ignoring bad values); true when members_ changed.
  bool Apply(const EtcdEvent& event) REQUIRES(members_mu_);
  void Publish() REQUIRES(members_mu_);
  bool WaitForStop(int64_t ms);

  const RegistryWatcherOptions options_;
  RegistryListener* const listener_;
  EtcdClient etcd_;
  Mutex members_mu_;  // the session thread (listing) and the watch thread (events)
  std::map<std::string, MemberInfo> members_ GUARDED_BY(members_mu_);
  std::map<std::string, int64_t> logged_invalid_ GUARDED_BY(members_mu_);  // key -> revision
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvferry::cluster
