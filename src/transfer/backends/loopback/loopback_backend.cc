// Loopback backend: memcpy between agents of one process (tests of the layers above).
// Agents find each other by name in a process-wide registry; a transfer runs synchronously
// inside Post, under the registry lock, so a peer cannot be destroyed mid-copy.
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "kvferry/common/logging.h"
#include "kvferry/transfer/loopback.h"
#include "transfer/backend.h"

namespace kvferry::transfer {
namespace {

struct FaultEntry {
  loopback::Fault fault;
  StatusCode code;
};

class LoopbackBackend;

struct Registry {
  Mutex mu;
  std::map<std::string, LoopbackBackend*, std::less<>> agents GUARDED_BY(mu);
  std::map<std::string, std::deque<FaultEntry>, std::less<>> faults GUARDED_BY(mu);
  std::map<std::string, std::deque<FaultEntry>, std::less<>> target_faults GUARDED_BY(mu);
};

// Pops the next fault queued for `name` in `faults`, if any.
std::optional<FaultEntry> PopFault(
    std::map<std::string, std::deque<FaultEntry>, std::less<>>& faults, std::string_view name) {
  auto it = faults.find(name);
  if (it == faults.end() || it->second.empty()) return std::nullopt;
  FaultEntry f = it->second.front();
  it->second.pop_front();
  return f;
}
Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

class LoopbackBackend final : public Backend {
 public:
  explicit LoopbackBackend(BackendContext ctx) : ctx_(std::move(ctx)) {}
  ~LoopbackBackend() override {
    Registry& reg = GetRegistry();
    MutexLock l(&reg.mu);
    auto it = reg.agents.find(ctx_.agent_name);
    if (it != reg.agents.end() && it->second == this) reg.agents.erase(it);
    reg.faults.erase(ctx_.agent_name);
    reg.target_faults.erase(ctx_.agent_name);
  }

  Status Start() {
    Registry& reg = GetRegistry();
    MutexLock l(&reg.mu);
    if (reg.agents.count(ctx_.agent_name)) {
      return AlreadyExistsError("loopback agent '" + ctx_.agent_name + "' already exists");
    }
    reg.agents[ctx_.agent_name] = this;
    return Status::Ok();
  }

  Status RegisterMemory(uint32_t id, void* addr, uint64_t length) override {
    MutexLock l(&GetRegistry().mu);
    regions_[id] = {static_cast<uint8_t*>(addr), length};
    return Status::Ok();
  }
  Status DeregisterMemory(uint32_t id) override {
    MutexLock l(&GetRegistry().mu);
    regions_.erase(id);
    return Status::Ok();
  }
  StatusOr<std::string> LocalBlob() const override { return ctx_.agent_name; }
  Status AddPeer(uint32_t peer_id, const std::string& peer_name, std::string_view blob) override {
    if (blob != peer_name) return InvalidArgumentError("loopback blob does not match agent name");
    MutexLock l(&GetRegistry().mu);
    if (!GetRegistry().agents.count(peer_name)) {
      return UnavailableError("no loopback agent '" + peer_name + "' in this process");
    }
    peers_[peer_id] = peer_name;
    return Status::Ok();
  }
  void RemovePeer(uint32_t peer_id) override {
    MutexLock l(&GetRegistry().mu);
    peers_.erase(peer_id);
  }

  Status Post(uint32_t peer_id, XferOp op, std::vector<Segment> segments, std::string notification,
              std::shared_ptr<Completion> completion) override {
    Registry& reg = GetRegistry();
    MutexLock l(&reg.mu);
    auto pit = peers_.find(peer_id);
    if (pit == peers_.end()) return UnavailableError("loopback peer removed");
    auto ait = reg.agents.find(pit->second);
    if (ait == reg.agents.end())
      return UnavailableError("loopback peer '" + pit->second + "' is gone");
    LoopbackBackend* peer = ait->second;
    bool drop_notification = false;
    std::optional<FaultEntry> f = PopFault(reg.faults, ctx_.agent_name);
    if (!f.has_value()) f = PopFault(reg.target_faults, pit->second);
    if (f.has_value()) {
      if (f->fault == loopback::Fault::kFailNext) {
        completion->Finish(Status(f->code, "loopback: injected failure"));
        return Status::Ok();
      }
      if (f->fault == loopback::Fault::kStallNext) return Status::Ok();  // deadline will fire
      drop_notification = true;
    }
    for (const Segment& s : segments) {
      auto rit = peer->regions_.find(s.remote_region);
      if (rit == peer->regions_.end()) {
        completion->Finish(NotFoundError("loopback: peer region " +
                                         std::to_string(s.remote_region) + " not registered"));
        return Status::Ok();
      }
      if (s.remote_offset + s.length > rit->second.length) {
        completion->Finish(InvalidArgumentError("loopback: remote range out of bounds"));
        return Status::Ok();
      }
      uint8_t* remote = rit->second.base + s.remote_offset;
      if (op == XferOp::kWrite) {
        std::memmove(remote, s.local_addr, s.length);
      } else {
        std::memmove(s.local_addr, remote, s.length);
      }
    }
    completion->Finish(Status::Ok());
    if (!notification.empty() && !drop_notification) {
      peer->ctx_.deliver_notification({ctx_.agent_name, std::move(notification)});
    }
    return Status::Ok();
  }

  void Cancel(const std::shared_ptr<Completion>&) override {}

  Status SendNotification(uint32_t peer_id, std::string message) override {
    Registry& reg = GetRegistry();
    MutexLock l(&reg.mu);
    auto pit = peers_.find(peer_id);
    if (pit == peers_.end()) return UnavailableError("loopback peer removed");
    auto ait = reg.agents.find(pit->second);
    if (ait == reg.agents.end())
      return UnavailableError("loopback peer '" + pit->second + "' is gone");
    ait->second->ctx_.deliver_notification({ctx_.agent_name, std::move(message)});
    return Status::Ok();
  }

 private:
  struct Region {
    uint8_t* base;
    uint64_t length;
  };
  const BackendContext ctx_;
  // Guarded by the registry mutex (one lock for all loopback agents).
  std::map<uint32_t, Region> regions_;
  std::map<uint32_t, std::string> peers_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateLoopbackBackend(BackendContext context) {
  auto b = std::make_unique<LoopbackBackend>(std::move(context));
  KVF_RETURN_IF_ERROR(b->Start());
  return std::unique_ptr<Backend>(std::move(b));
}

namespace loopback {

Status InjectFault(std::string_view agent_name, Fault fault, StatusCode code) {
  Registry& reg = GetRegistry();
  MutexLock l(&reg.mu);
  if (reg.agents.find(agent_name) == reg.agents.end()) {
    return NotFoundError("no loopback agent '" + std::string(agent_name) + "'");
  }
  reg.faults[std::string(agent_name)].push_back({fault, code});
  return Status::Ok();
}

Status InjectTargetFault(std::string_view agent_name, Fault fault, StatusCode code) {
  Registry& reg = GetRegistry();
  MutexLock l(&reg.mu);
  if (reg.agents.find(agent_name) == reg.agents.end()) {
    return NotFoundError("no loopback agent '" + std::string(agent_name) + "'");
  }
  reg.target_faults[std::string(agent_name)].push_back({fault, code});
  return Status::Ok();
}

void ClearFaults(std::string_view agent_name) {
  Registry& reg = GetRegistry();
  MutexLock l(&reg.mu);
  auto it = reg.faults.find(agent_name);
  if (it != reg.faults.end()) reg.faults.erase(it);
  auto tit = reg.target_faults.find(agent_name);
  if (tit != reg.target_faults.end()) reg.target_faults.erase(tit);
}

}  // namespace loopback
}  // namespace kvferry::transfer
