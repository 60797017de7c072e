#include "cluster/registry_watcher.h"

#include "kvferry/common/logging.h"

namespace kvferry::cluster {

std::unique_ptr<RegistryWatcher> RegistryWatcher::Start(RegistryWatcherOptions options,
                                                        RegistryListener* listener) {
  std::unique_ptr<RegistryWatcher> w(new RegistryWatcher(std::move(options), listener));
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

RegistryWatcher::RegistryWatcher(RegistryWatcherOptions options, RegistryListener* listener)
    : options_(std::move(options)),
      listener_(listener),
      etcd_(options_.address.endpoints, options_.call_timeout_ms) {}

RegistryWatcher::~RegistryWatcher() { Stop(); }

void RegistryWatcher::Stop() {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    cv_.NotifyAll();
  }
  thread_.join();
}

bool RegistryWatcher::WaitForStop(int64_t ms) {
  MutexLock lock(&mu_);
  return cv_.WaitFor(&mu_, std::chrono::milliseconds(ms), [this]() REQUIRES(mu_) { return stop_; });
}

void RegistryWatcher::Run() {
  bool logged_outage = false;
  while (true) {
    bool connected = false;
    const Status why = Session(&connected);
    if (WaitForStop(0)) return;
    listener_->SetRegistryConnected(false);
    if (connected) logged_outage = false;  // it answered in between: a new outage
    if (!logged_outage) {
      size_t known;
      {
        MutexLock lock(&members_mu_);
        known = members_.size();
      }
      KVF_LOG_WARN(
          "registry {} unreachable: {}; routing to the {} last known members, retrying "
          "every {} ms",
          options_.address.ToString(), why.ToString(), known, options_.retry_interval_ms);
      logged_outage = true;
    }
    if (WaitForStop(options_.retry_interval_ms)) return;
  }
}

Status RegistryWatcher::Session(bool* connected) {
  const std::string prefix = options_.address.MembersPrefix();
  KVF_ASSIGN_OR_RETURN(EtcdRange range, etcd_.RangePrefix(prefix));
  size_t count;
  {
    MutexLock lock(&members_mu_);
    members_.clear();
    for (const EtcdKv& kv : range.kvs) Apply(EtcdEvent{false, kv.key, kv.value, kv.mod_revision});
    Publish();
    count = members_.size();
  }
  listener_->SetRegistryConnected(true);
  *connected = true;
  KVF_LOG_INFO("registry {}: connected, {} members (revision {})", options_.address.ToString(),
               count, range.revision);
  EtcdWatch watch(
      etcd_.current(), prefix, range.revision + 1,
      [this](const std::vector<EtcdEvent>& events) {
        MutexLock lock(&members_mu_);
        bool changed = false;
        for (const EtcdEvent& e : events) changed = Apply(e) || changed;
        if (changed) Publish();
      },
      options_.call_timeout_ms);
  while (!WaitForStop(options_.health_interval_ms)) {
    if (watch.ended()) return watch.status();
    KVF_RETURN_IF_ERROR(etcd_.Health());
  }
  return Status::Ok();
}

bool RegistryWatcher::Apply(const EtcdEvent& e) {
  const std::string prefix = options_.address.MembersPrefix();
  const std::string id = e.key.substr(std::min(prefix.size(), e.key.size()));
  if (e.is_delete) {
    listener_->CountRegistryEvent("delete");
    logged_invalid_.erase(e.key);
    return members_.erase(id) > 0;
  }
  StatusOr<MemberInfo> m = id.empty() || id.find('/') != std::string::npos
                               ? StatusOr<MemberInfo>(InvalidArgumentError("not a member key"))
                               : DecodeMember(id, e.value);
  if (!m.ok()) {
    listener_->CountRegistryEvent("invalid");
    auto [it, inserted] = logged_invalid_.try_emplace(e.key, e.mod_revision);
    if (inserted || it->second != e.mod_revision) {
      it->second = e.mod_revision;
      KVF_LOG_WARN("registry: ignoring {} (revision {}): {}", e.key, e.mod_revision,
                   m.status().ToString());
    }
    return members_.erase(id) > 0;
  }
  listener_->CountRegistryEvent("put");
  auto it = members_.find(id);
  if (it != members_.end() && it->second == *m) return false;
  members_[id] = std::move(m).value();
  return true;
}

void RegistryWatcher::Publish() {
  std::vector<MemberInfo> all;
  all.reserve(members_.size());
  for (const auto& [id, m] : members_) all.push_back(m);
  listener_->SetMembers(std::move(all));
}

}  // namespace kvferry::cluster
