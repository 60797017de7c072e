#include "kvferry/transfer/agent.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "kvferry/common/logging.h"
#include "kvferry/common/thread_annotations.h"
#include "transfer/backend.h"
#include "transfer/metadata.h"
#include "transfer/plan.h"

namespace kvferry::transfer {

std::string_view XferOpName(XferOp op) { return op == XferOp::kRead ? "READ" : "WRITE"; }

// ---- Completion ----------------------------------------------------------------------------

void Completion::Finish(Status status) {
  MutexLock l(&mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(status);
  cv_.NotifyAll();
}
bool Completion::done() const {
  MutexLock l(&mu_);
  return done_;
}
Status Completion::status() const {
  MutexLock l(&mu_);
  return status_;
}
bool Completion::WaitUntil(Deadline deadline) {
  MutexLock l(&mu_);
  return cv_.WaitUntil(&mu_, deadline.time_point(), [&]() REQUIRES(mu_) { return done_; });
}

// ---- Agent ---------------------------------------------------------------------------------

namespace {

struct LocalRegion {
  uint8_t* base = nullptr;
  uint64_t length = 0;
  bool agent_owned = false;  // allocated by the Agent (std::free at deregistration)
};

struct Peer {
  std::string name;
  std::map<uint32_t, uint64_t> region_lengths;
  std::set<uint32_t> mapped_regions;  // Backend::MappedRegions
  bool failed = false;
};

struct Prepared {
  XferOp op;
  uint32_t peer_id;
  std::vector<DescriptorPair> pairs;
  std::string notification;
  int64_t timeout_ms;
  XferInfo info;
  std::shared_ptr<Completion> inflight;  // null before the first Post
};

}  // namespace

struct Agent::Impl {
  std::string name;
  BackendKind kind;
  std::unique_ptr<Backend> backend;

  mutable Mutex mu;
  uint32_t next_region_id GUARDED_BY(mu) = 1;
  uint32_t next_peer_id GUARDED_BY(mu) = 1;
  uint64_t next_xfer_id GUARDED_BY(mu) = 1;
  std::map<uint32_t, LocalRegion> regions GUARDED_BY(mu);
  std::map<uint32_t, Peer> peers GUARDED_BY(mu);
  std::map<uint64_t, std::shared_ptr<Prepared>> xfers GUARDED_BY(mu);

  Mutex notif_mu;
  CondVar notif_cv;
  std::deque<Notification> notifications GUARDED_BY(notif_mu);

  void Deliver(Notification n) {
    MutexLock l(&notif_mu);
    notifications.push_back(std::move(n));
    notif_cv.NotifyAll();
  }

  StatusOr<std::shared_ptr<Prepared>> FindXfer(XferHandle h) {
    MutexLock l(&mu);
    auto it = xfers.find(h.id);
    if (it == xfers.end()) return NotFoundError("unknown transfer " + std::to_string(h.id));
    return it->second;
  }
};

Agent::Agent(std::string name, std::unique_ptr<Impl> impl)
    : name_(std::move(name)), impl_(std::move(impl)) {}

Agent::~Agent() {
  // The backend goes first: it stops its threads, which may still deliver notifications.
  impl_->backend.reset();
  MutexLock l(&impl_->mu);
  for (auto& [id, r] : impl_->regions) {
    if (r.agent_owned) std::free(r.base);
  }
}

StatusOr<std::unique_ptr<Agent>> Agent::Create(const AgentOptions& options) {
  if (options.name.empty()) return InvalidArgumentError("agent name must not be empty");
  auto impl = std::make_unique<Impl>();
  impl->name = options.name;
  impl->kind = options.backend;
  Impl* raw = impl.get();
  BackendContext ctx{options.name, options.ucx, options.socket,
                     [raw](Notification n) { raw->Deliver(std::move(n)); }};
  if (options.backend == BackendKind::kLoopback) {
    KVF_ASSIGN_OR_RETURN(impl->backend, CreateLoopbackBackend(std::move(ctx)));
  } else if (options.backend == BackendKind::kSocket) {
    KVF_ASSIGN_OR_RETURN(impl->backend, CreateSocketBackend(std::move(ctx)));
  } else {
    KVF_ASSIGN_OR_RETURN(impl->backend, CreateUcxBackend(std::move(ctx)));
  }
  return std::unique_ptr<Agent>(new Agent(options.name, std::move(impl)));
}

StatusOr<RegionHandle> Agent::RegisterMemory(void* addr, uint64_t length, MemoryKind kind) {
  if (kind == MemoryKind::kDevice) {
    return UnimplementedError("device memory is not supported by this build (no CUDA)");
  }
  if (addr == nullptr || length == 0) return InvalidArgumentError("RegisterMemory: empty range");
  uint32_t id;
  {
    MutexLock l(&impl_->mu);
    id = impl_->next_region_id++;
  }
  KVF_RETURN_IF_ERROR(impl_->backend->RegisterMemory(id, addr, length));
  MutexLock l(&impl_->mu);
  impl_->regions[id] = {static_cast<uint8_t*>(addr), length, false};
  return RegionHandle{id};
}

Status Agent::DeregisterMemory(RegionHandle region) {
  LocalRegion r;
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->regions.find(region.id);
    if (it == impl_->regions.end()) {
      return NotFoundError("unknown region " + std::to_string(region.id));
    }
    r = it->second;
    impl_->regions.erase(it);
  }
  Status s = impl_->backend->DeregisterMemory(region.id);
  if (r.agent_owned) std::free(r.base);  // after the backend stopped using it
  return s;
}

StatusOr<AllocatedMemory> Agent::AllocateMemory(uint64_t length) {
  if (length == 0) return InvalidArgumentError("AllocateMemory: zero bytes");
  uint32_t id;
  {
    MutexLock l(&impl_->mu);
    id = impl_->next_region_id++;
  }
  LocalRegion r{nullptr, length, false};
  StatusOr<void*> shared = impl_->backend->AllocateMemory(id, length);
  if (shared.ok()) {
    r.base = static_cast<uint8_t*>(*shared);
    std::memset(r.base, 0, length);
  } else {
    // No shareable allocation here (Unimplemented), or none left (sysv limits): ordinary
    // memory, which works everywhere but which a peer on this host cannot map.
    if (shared.status().code() != StatusCode::kUnimplemented) {
      KVF_LOG_WARN("agent '{}': shared allocation of {} bytes failed ({}); ordinary memory instead",
                   name_, length, shared.status().ToString());
    }
    constexpr uint64_t kPage = 4096;
    void* p = std::aligned_alloc(kPage, (length + kPage - 1) / kPage * kPage);
    if (p == nullptr) return ResourceExhaustedError("AllocateMemory: out of memory");
    std::memset(p, 0, length);
    if (Status s = impl_->backend->RegisterMemory(id, p, length); !s.ok()) {
      std::free(p);
      return s;
    }
    r = {static_cast<uint8_t*>(p), length, true};
  }
  MutexLock l(&impl_->mu);
  impl_->regions[id] = r;
  return AllocatedMemory{RegionHandle{id}, r.base};
}

StatusOr<std::string> Agent::GetLocalMetadata() const {
  AgentMetadata md;
  md.backend = std::string(BackendKindName(impl_->kind));
  md.agent_name = name_;
  {
    MutexLock l(&impl_->mu);
    for (const auto& [id, r] : impl_->regions) md.regions.push_back({id, r.length});
  }
  KVF_ASSIGN_OR_RETURN(md.backend_blob, impl_->backend->LocalBlob());
  return EncodeMetadata(md);
}

StatusOr<PeerHandle> Agent::LoadRemoteMetadata(std::string_view metadata) {
  KVF_ASSIGN_OR_RETURN(AgentMetadata md, DecodeMetadata(metadata));
  if (md.backend != BackendKindName(impl_->kind)) {
    return InvalidArgumentError("metadata of backend '" + md.backend + "', this agent uses '" +
                                std::string(BackendKindName(impl_->kind)) + "'");
  }
  uint32_t old_id = 0;
  uint32_t id;
  {
    MutexLock l(&impl_->mu);
    for (const auto& [pid, p] : impl_->peers) {
      if (p.name == md.agent_name) old_id = pid;
    }
    id = impl_->next_peer_id++;
  }
  if (old_id != 0) RemovePeer(PeerHandle{old_id}).IgnoreError();
  KVF_RETURN_IF_ERROR(impl_->backend->AddPeer(id, md.agent_name, md.backend_blob));
  Peer peer;
  peer.name = md.agent_name;
  for (const RegionEntry& r : md.regions) peer.region_lengths[r.id] = r.length;
  for (uint32_t r : impl_->backend->MappedRegions(id)) peer.mapped_regions.insert(r);
  MutexLock l(&impl_->mu);
  impl_->peers[id] = std::move(peer);
  return PeerHandle{id};
}

Status Agent::RemovePeer(PeerHandle peer) {
  {
    MutexLock l(&impl_->mu);
    if (impl_->peers.erase(peer.id) == 0) {
      return NotFoundError("unknown peer " + std::to_string(peer.id));
    }
  }
  impl_->backend->RemovePeer(peer.id);
  return Status::Ok();
}

StatusOr<std::string> Agent::PeerName(PeerHandle peer) const {
  MutexLock l(&impl_->mu);
  auto it = impl_->peers.find(peer.id);
  if (it == impl_->peers.end()) return NotFoundError("unknown peer " + std::to_string(peer.id));
  return it->second.name;
}

StatusOr<XferHandle> Agent::PrepareTransfer(const TransferRequest& req) {
  auto p = std::make_shared<Prepared>();
  MutexLock l(&impl_->mu);
  auto peer_it = impl_->peers.find(req.peer.id);
  if (peer_it == impl_->peers.end()) {
    return NotFoundError("unknown peer " + std::to_string(req.peer.id));
  }
  if (req.local.size() != req.remote.size()) {
    return InvalidArgumentError("descriptor lists differ in size: local " +
                                std::to_string(req.local.size()) + ", remote " +
                                std::to_string(req.remote.size()));
  }
  if (req.local.empty()) return InvalidArgumentError("empty descriptor list");
  if (req.timeout_ms <= 0) return InvalidArgumentError("timeout_ms must be > 0");
  uint64_t total = 0;
  bool by_memcpy = true;
  for (size_t i = 0; i < req.local.size(); ++i) {
    const Descriptor& lo = req.local[i];
    const Descriptor& re = req.remote[i];
    std::string at = "descriptor " + std::to_string(i) + ": ";
    if (lo.length != re.length) return InvalidArgumentError(at + "local and remote lengths differ");
    if (lo.length == 0) return InvalidArgumentError(at + "zero length");
    auto lr = impl_->regions.find(lo.region.id);
    if (lr == impl_->regions.end()) {
      return NotFoundError(at + "unknown local region " + std::to_string(lo.region.id));
    }
    if (lo.offset > lr->second.length || lo.length > lr->second.length - lo.offset) {
      return InvalidArgumentError(at + "local range out of region bounds");
    }
    auto rr = peer_it->second.region_lengths.find(re.region.id);
    if (rr == peer_it->second.region_lengths.end()) {
      return NotFoundError(at + "peer '" + peer_it->second.name + "' has no region " +
                           std::to_string(re.region.id) + " (invalid remote key)");
    }
    if (re.offset > rr->second || re.length > rr->second - re.offset) {
      return InvalidArgumentError(at + "remote range out of region bounds");
    }
    total += lo.length;
    by_memcpy &= peer_it->second.mapped_regions.count(re.region.id) != 0;
  }
  p->op = req.op;
  p->peer_id = req.peer.id;
  p->pairs = MergeAdjacent(req.local, req.remote);
  p->notification = req.notification;
  p->timeout_ms = req.timeout_ms;
  p->info = {total, static_cast<uint32_t>(req.local.size()), static_cast<uint32_t>(p->pairs.size()),
             by_memcpy};
  uint64_t id = impl_->next_xfer_id++;
  impl_->xfers[id] = std::move(p);
  return XferHandle{id};
}

StatusOr<XferInfo> Agent::GetXferInfo(XferHandle xfer) const {
  MutexLock l(&impl_->mu);
  auto it = impl_->xfers.find(xfer.id);
  if (it == impl_->xfers.end()) return NotFoundError("unknown transfer " + std::to_string(xfer.id));
  return it->second->info;
}

Status Agent::Post(XferHandle xfer) {
  KVF_ASSIGN_OR_RETURN(std::shared_ptr<Prepared> p, impl_->FindXfer(xfer));
  if (p->inflight && !p->inflight->done()) {
    return FailedPreconditionError("transfer " + std::to_string(xfer.id) + " is in flight");
  }
  std::vector<Segment> segments;
  segments.reserve(p->pairs.size());
  {
    MutexLock l(&impl_->mu);
    if (impl_->peers.find(p->peer_id) == impl_->peers.end()) {
      return UnavailableError("peer of transfer " + std::to_string(xfer.id) + " was removed");
    }
    for (const DescriptorPair& d : p->pairs) {
      auto it = impl_->regions.find(d.local.region.id);
      if (it == impl_->regions.end()) {
        return NotFoundError("local region " + std::to_string(d.local.region.id) +
                             " was deregistered");
      }
      segments.push_back({it->second.base + d.local.offset, d.local.region.id, d.remote.region.id,
                          d.remote.offset, d.local.length});
    }
  }
  auto c = std::make_shared<Completion>(Deadline::AfterMs(p->timeout_ms));
  p->inflight = c;
  Status s = impl_->backend->Post(p->peer_id, p->op, std::move(segments), p->notification, c);
  if (!s.ok()) c->Finish(s);
  return s;
}

StatusOr<XferState> Agent::Poll(XferHandle xfer) {
  KVF_ASSIGN_OR_RETURN(std::shared_ptr<Prepared> p, impl_->FindXfer(xfer));
  if (!p->inflight) return FailedPreconditionError("transfer was never posted");
  if (!p->inflight->done()) impl_->backend->Drive(p->inflight, Deadline::AfterMs(0));
  if (!p->inflight->done()) {
    // Backstop: backends enforce deadlines themselves; this keeps Poll honest regardless.
    if (!p->inflight->deadline().Expired()) return XferState::kInProgress;
    if (!p->inflight->WaitUntil(Deadline::AfterMs(200))) {
      impl_->backend->Cancel(p->inflight);
      p->inflight->Finish(DeadlineExceededError("transfer deadline passed"));
    }
  }
  Status s = p->inflight->status();
  if (!s.ok()) return s;
  return XferState::kDone;
}

Status Agent::Wait(XferHandle xfer, Deadline deadline) {
  KVF_ASSIGN_OR_RETURN(std::shared_ptr<Prepared> p, impl_->FindXfer(xfer));
  if (!p->inflight) return FailedPreconditionError("transfer was never posted");
  while (true) {
    // Wake at the transfer's own deadline too, so that the Poll backstop can fire.
    Deadline first = p->inflight->deadline().time_point() < deadline.time_point()
                         ? p->inflight->deadline()
                         : deadline;
    impl_->backend->Drive(p->inflight, first);
    KVF_ASSIGN_OR_RETURN(XferState st, Poll(xfer));
    if (st == XferState::kDone) return Status::Ok();
    if (deadline.Expired()) {
      return DeadlineExceededError("Wait: deadline passed, transfer still in flight");
    }
  }
}

Status Agent::Release(XferHandle xfer) {
  std::shared_ptr<Prepared> p;
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->xfers.find(xfer.id);
    if (it == impl_->xfers.end())
      return NotFoundError("unknown transfer " + std::to_string(xfer.id));
    p = std::move(it->second);
    impl_->xfers.erase(it);
  }
  if (p->inflight && !p->inflight->done()) {
    impl_->backend->Cancel(p->inflight);
    p->inflight->Finish(AbortedError("transfer released while in flight"));
  }
  return Status::Ok();
}

Status Agent::SendNotification(PeerHandle peer, std::string_view message) {
  {
    MutexLock l(&impl_->mu);
    if (impl_->peers.find(peer.id) == impl_->peers.end()) {
      return NotFoundError("unknown peer " + std::to_string(peer.id));
    }
  }
  return impl_->backend->SendNotification(peer.id, std::string(message));
}

std::vector<Notification> Agent::GetNotifications() {
  MutexLock l(&impl_->notif_mu);
  std::vector<Notification> out(std::make_move_iterator(impl_->notifications.begin()),
                                std::make_move_iterator(impl_->notifications.end()));
  impl_->notifications.clear();
  return out;
}

std::vector<Notification> Agent::WaitNotifications(Deadline deadline) {
  {
    MutexLock l(&impl_->notif_mu);
    impl_->notif_cv.WaitUntil(
        &impl_->notif_mu, deadline.time_point(),
        [&]() REQUIRES(impl_->notif_mu) { return !impl_->notifications.empty(); });
  }
  return GetNotifications();
}

AgentStats Agent::Stats() const { return impl_->backend->Stats(); }

}  // namespace kvferry::transfer
