// EtcdWatch: one etcd watch stream over the JSON gateway (POST /v3/watch, answered by a stream
// of newline-separated JSON messages), read on its own thread. Events reach the handler on that
// thread, in revision order.
//
// The stream ends when etcd closes it, the connection breaks, etcd cancels the watch (e.g. the
// start revision was compacted away: the watcher must list again), or Cancel() is called;
// ended() then turns true and status() says why. A stalled stream (etcd stopped, or cut off)
// does not end by itself: the owner checks etcd's health on its own deadline and cancels.
//
// Thread-safety: ended(), created(), status() and Cancel() may be called from any thread; the
// destructor cancels and joins.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/cluster/registry_address.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"

namespace httplib {
class Client;
}

namespace kvferry::cluster {

struct EtcdEvent {
  bool is_delete = false;
  std::string key;
  std::string value;  // empty for a delete
  int64_t mod_revision = 0;
};

class EtcdWatch {
 public:
  using Handler = std::function<void(const std::vector<EtcdEvent>&)>;

  // Watches every key starting with `prefix`, from `start_revision` on.
  EtcdWatch(EtcdEndpoint endpoint, std::string prefix, int64_t start_revision, Handler handler,
            int64_t connect_timeout_ms);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  bool created() const;  // etcd confirmed the watch
  bool ended() const;
  Status status() const;  // why it ended (OK while running)
  void Cancel();

 private:
  void Run(std::string prefix, int64_t start_revision);
  // Consumes complete lines of `pending_`; false when the stream must stop (etcd cancelled).
  bool ConsumeLines();
  void Finish(Status why);

  const EtcdEndpoint endpoint_;
  const Handler handler_;
  std::unique_ptr<httplib::Client> client_;
  std::string pending_;  // watch thread only: bytes after the last newline
  mutable Mutex mu_;
  CondVar cv_;
  bool created_ GUARDED_BY(mu_) = false;
  bool ended_ GUARDED_BY(mu_) = false;
  bool cancelled_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvferry::cluster
