#include "cluster/etcd_watch.h"

#include <httplib.h>

#include "cluster/etcd_json.h"
#include "kvferry/common/logging.h"

namespace kvferry::cluster {

using nlohmann::json;

namespace {

// A watch stream is silent while nothing changes; the owner's health check, not a read
// timeout, decides when it is dead.
constexpr int kStreamReadTimeoutS = 24 * 3600;

}  // namespace

EtcdWatch::EtcdWatch(EtcdEndpoint endpoint, std::string prefix, int64_t start_revision,
                     Handler handler, int64_t connect_timeout_ms)
    : endpoint_(std::move(endpoint)),
      handler_(std::move(handler)),
      client_(std::make_unique<httplib::Client>(endpoint_.host, endpoint_.port)) {
  client_->set_connection_timeout(std::chrono::milliseconds(connect_timeout_ms));
  client_->set_read_timeout(std::chrono::seconds(kStreamReadTimeoutS));
  client_->set_write_timeout(std::chrono::milliseconds(connect_timeout_ms));
  thread_ = std::thread([this, p = std::move(prefix), start_revision]() mutable {
    Run(std::move(p), start_revision);
  });
}

EtcdWatch::~EtcdWatch() {
  Cancel();
  // httplib's stop() interrupts only a request already in flight, and Cancel may have come
  // before the thread sent its request: repeat it until the thread is out of send().
  while (true) {
    {
      MutexLock lock(&mu_);
      if (cv_.WaitFor(&mu_, std::chrono::milliseconds(20),
                      [this]() REQUIRES(mu_) { return ended_; })) {
        break;
      }
    }
    client_->stop();
  }
  thread_.join();
}

bool EtcdWatch::created() const {
  MutexLock lock(&mu_);
  return created_;
}

bool EtcdWatch::ended() const {
  MutexLock lock(&mu_);
  return ended_;
}

Status EtcdWatch::status() const {
  MutexLock lock(&mu_);
  return status_;
}

void EtcdWatch::Cancel() {
  {
    MutexLock lock(&mu_);
    if (cancelled_ || ended_) {
      cancelled_ = true;
      return;
    }
    cancelled_ = true;
  }
  client_->stop();
}

void EtcdWatch::Finish(Status why) {
  MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  status_ = cancelled_ ? AbortedError("watch cancelled") : std::move(why);
  cv_.NotifyAll();
}

void EtcdWatch::Run(std::string prefix, int64_t start_revision) {
  const json create = {{"create_request",
                        {{"key", Base64Encode(prefix)},
                         {"range_end", Base64Encode(PrefixEnd(prefix))},
                         {"start_revision", std::to_string(start_revision)}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = create.dump();
  req.set_header("Content-Type", "application/json");
  bool stopped_by_etcd = false;
  {
    MutexLock lock(&mu_);
    if (cancelled_) {
      ended_ = true;
      status_ = AbortedError("watch cancelled");
      cv_.NotifyAll();
      return;
    }
  }
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    {
      MutexLock lock(&mu_);
      if (cancelled_) return false;
    }
    pending_.append(data, n);
    if (!ConsumeLines()) {
      stopped_by_etcd = true;
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client_->send(req, res, err);
  if (stopped_by_etcd) return;  // Finish was called with etcd's reason
  if (!ok) {
    Finish(
        UnavailableError("etcd watch on " + endpoint_.ToString() + ": " + httplib::to_string(err)));
  } else if (res.status != 200) {
    Finish(UnavailableError("etcd watch on " + endpoint_.ToString() + ": HTTP " +
                            std::to_string(res.status)));
  } else {
    Finish(UnavailableError("etcd watch on " + endpoint_.ToString() + ": stream closed"));
  }
}

bool EtcdWatch::ConsumeLines() {
  size_t nl;
  while ((nl = pending_.find('\n')) != std::string::npos) {
    const std::string line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    if (line.empty() || line == "\r") continue;
    const json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!msg.is_object()) {
      KVF_LOG_WARN("etcd watch on {}: skipping a message that is not JSON", endpoint_.ToString());
      continue;
    }
    if (msg.contains("error")) {
      Finish(EtcdError(msg["error"], "etcd watch"));
      return false;
    }
    const json& r = msg.contains("result") ? msg["result"] : msg;
    if (r.value("canceled", false)) {
      Finish(FailedPreconditionError("etcd cancelled the watch (compact revision " +
                                     std::to_string(Int64Of(r, "compact_revision")) +
                                     "): " + r.value("cancel_reason", std::string())));
      return false;
    }
    if (r.value("created", false)) {
      MutexLock lock(&mu_);
      created_ = true;
    }
    if (!r.contains("events") || !r["events"].is_array()) continue;
    std::vector<EtcdEvent> events;
    for (const json& e : r["events"]) {
      auto kv = KvOf(e.value("kv", json::object()));
      if (!kv.ok()) {
        KVF_LOG_WARN("etcd watch: skipping an event: {}", kv.status().ToString());
        continue;
      }
      events.push_back(EtcdEvent{e.value("type", std::string()) == "DELETE", std::move(kv->key),
                                 std::move(kv->value), kv->mod_revision});
    }
    if (!events.empty()) handler_(events);
  }
  return true;
}

}  // namespace kvferry::cluster
