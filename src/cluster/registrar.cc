#include "kvferry/cluster/registrar.h"

#include "cluster/etcd_client.h"
#include "kvferry/common/logging.h"

namespace kvferry::cluster {

StatusOr<std::unique_ptr<Registrar>> Registrar::Start(RegistrarOptions options, MemberInfo member) {
  if (options.ttl_s < 2) {
    return InvalidArgumentError("registry TTL must be at least 2 s (etcd's minimum), got " +
                                std::to_string(options.ttl_s));
  }
  if (member.id.empty()) return InvalidArgumentError("a registered member needs an id");
  if (options.address.endpoints.empty()) return InvalidArgumentError("no registry endpoint");
  std::unique_ptr<Registrar> r(new Registrar(std::move(options), std::move(member)));
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  return r;
}

Registrar::Registrar(RegistrarOptions options, MemberInfo member)
    : options_(std::move(options)),
      member_(std::move(member)),
      key_(options_.address.MembersPrefix() + member_.id),
      value_(EncodeMember(member_)),
      etcd_(std::make_unique<EtcdClient>(options_.address.endpoints, options_.call_timeout_ms)) {}

Registrar::~Registrar() { Stop(); }

bool Registrar::registered() const {
  MutexLock lock(&mu_);
  return registered_;
}

void Registrar::Run() {
  while (true) {
    const int64_t wait_ms = Step();
    MutexLock lock(&mu_);
    if (cv_.WaitFor(&mu_, std::chrono::milliseconds(wait_ms),
                    [this]() REQUIRES(mu_) { return stop_; })) {
      return;
    }
  }
}

int64_t Registrar::Step() {
  const int64_t keepalive_ms = options_.ttl_s * 1000 / 3;
  Status s = Status::Ok();
  if (lease_ != 0) {
    auto ttl = etcd_->KeepAlive(lease_);
    if (ttl.ok()) {
      if (logged_unreachable_) KVF_LOG_INFO("registry: etcd reachable again; {} kept", key_);
      logged_unreachable_ = false;
      MutexLock lock(&mu_);
      registered_ = true;
      return keepalive_ms;
    }
    s = ttl.status();
    if (s.code() == StatusCode::kNotFound) {
      KVF_LOG_WARN(
          "registry: the lease of {} ran out (no keep-alive reached etcd for {} s); "
          "registering again",
          key_, options_.ttl_s);
      lease_ = 0;
      s = Status::Ok();
    }
  }
  if (lease_ == 0 && s.ok()) {
    auto lease = etcd_->GrantLease(options_.ttl_s);
    s = lease.status();
    if (lease.ok()) {
      lease_ = *lease;
      s = etcd_->Create(key_, value_, lease_);
      if (s.ok()) {
        KVF_LOG_INFO("registry: registered {} ({} at {}) under a {} s lease", key_,
                     MemberRoleName(member_.role), member_.url, options_.ttl_s);
        logged_conflict_ = logged_unreachable_ = false;
        MutexLock lock(&mu_);
        registered_ = true;
        return keepalive_ms;
      }
      // Not ours: give the lease back so it does not linger, and try again later.
      etcd_->RevokeLease(lease_).IgnoreError();
      lease_ = 0;
    }
  }
  {
    MutexLock lock(&mu_);
    registered_ = false;
  }
  if (s.code() == StatusCode::kAlreadyExists) {
    if (!logged_conflict_) {
      KVF_LOG_WARN(
          "registry: {} is held by another lease (the same engine id registered by "
          "another instance, or by this one before a restart); retrying until it is free",
          key_);
    }
    logged_conflict_ = true;
  } else if (!s.ok() && !logged_unreachable_) {
    KVF_LOG_WARN("registry: cannot register {}: {}; retrying every {} ms", key_, s.ToString(),
                 options_.retry_interval_ms);
    logged_unreachable_ = true;
  }
  return options_.retry_interval_ms;
}

void Registrar::Stop() {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    cv_.NotifyAll();
  }
  thread_.join();
  if (lease_ == 0) return;
  Status s = etcd_->RevokeLease(lease_);
  if (s.ok()) {
    KVF_LOG_INFO("registry: deregistered {}", key_);
  } else {
    KVF_LOG_WARN("registry: could not deregister {} ({}); etcd deletes it when its lease runs out",
                 key_, s.ToString());
  }
  lease_ = 0;
  MutexLock lock(&mu_);
  registered_ = false;
}

}  // namespace kvferry::cluster
