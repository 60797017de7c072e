// UCX backend: one ucp context + worker per agent, owned by a progress thread.
//
// Every UCX call after start-up runs on the progress thread; other threads hand it commands
// through a queue and an eventfd. Data paths per peer (docs/transfer.md):
//   RMA: ucp_put_nbx / ucp_get_nbx per segment, then ucp_ep_flush_nbx; flush success means the
//        bytes are visible at the destination. Used over shared memory.
//   AM:  WRITE sends each segment as an active message into the target's registered memory
//        (rendezvous for large ones, received straight into place); the target acknowledges once
//        all segments of the transfer landed. READ sends one request; the target answers with
//        one active message per segment, received straight into the initiator's memory. Used
//        over TCP, where UCX 1.13 only emulates put/get (~1 GB/s) but moves AM at link speed.
// Notifications are eager active messages sent after the transfer completed.
// Failure: each transfer has a deadline; a peer on the same host is checked for death by pid;
// on failure the endpoint is force-closed and the peer marked failed.
#include "transfer/backends/ucx/ucx_backend.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kvferry/common/logging.h"
#include "transfer/backend.h"
#include "transfer/backends/ucx/ucx_blob.h"
#include "transfer/backends/ucx/ucx_log.h"

namespace kvferry::transfer::ucx {

// ---- start / stop --------------------------------------------------------------------------

Status UcxBackend::Start() {
  RouteUcxLogToKvferry();  // before UCX reads its configuration: its warnings go to stderr
  // Shared memory transports drop out under UCP_ERR_HANDLING_MODE_PEER unless told otherwise
  // (UCX 1.13); the user's own settings win (overwrite = 0).
  if (ctx_.ucx.transport != UcxTransport::kTcp) {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    // Under PEER error mode there is no cma lane, so RMA over shared memory is emulated with
    // active messages through the peer's receive FIFO (64 x 8 KiB by default): a 1 MiB get
    // needs the two processes to take turns 2-3 times, each turn a wake-up and, on a busy
    // host, a scheduler tick. 256 x 32 KiB (8 MiB in flight) cut that by 16x (docs/transfer.md,
    // "Performance"). Costs ~16 MiB more of receive buffers per process. Both sides must agree;
    // every process of ours sets the same values.
    setenv("UCX_SYSV_FIFO_SIZE", "256", 0);
    setenv("UCX_POSIX_FIFO_SIZE", "256", 0);
    setenv("UCX_SYSV_SEG_SIZE", "32832", 0);
    setenv("UCX_POSIX_SEG_SIZE", "32832", 0);
  }
  ucp_config_t* raw_cfg = nullptr;
  KVF_RETURN_IF_ERROR(FromUcs(ucp_config_read(nullptr, nullptr, &raw_cfg), "ucp_config_read"));
  UcpConfig cfg(raw_cfg);
  if (getenv("UCX_TLS") == nullptr) {
    const char* tls = ctx_.ucx.transport == UcxTransport::kTcp   ? "tcp"
                      : ctx_.ucx.transport == UcxTransport::kShm ? "shm,self"
                                                                 : "all";
    KVF_RETURN_IF_ERROR(FromUcs(ucp_config_modify(cfg.get(), "TLS", tls), "set UCX TLS"));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = ctx_.agent_name.c_str();
  ucp_context_h raw_ctx = nullptr;
  KVF_RETURN_IF_ERROR(FromUcs(ucp_init(&params, cfg.get(), &raw_ctx), "ucp_init"));
  context_.reset(raw_ctx);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time, under wmu_
  ucp_worker_h raw_w = nullptr;
  KVF_RETURN_IF_ERROR(FromUcs(ucp_worker_create(context_.get(), &wp, &raw_w), "ucp_worker_create"));
  worker_.reset(raw_w);
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  KVF_RETURN_IF_ERROR(
      FromUcs(ucp_worker_get_address(worker_.get(), &addr, &addr_len), "ucp_worker_get_address"));
  worker_address_.assign(reinterpret_cast<const char*>(addr), addr_len);
  ucp_worker_release_address(worker_.get(), addr);
  KVF_RETURN_IF_ERROR(FromUcs(ucp_worker_get_efd(worker_.get(), &ucp_fd_), "ucp_worker_get_efd"));
  struct Handler {
    unsigned id;
    ucp_am_recv_callback_t cb;
  };
  for (Handler h : {Handler{kAmNotify, OnNotify}, Handler{kAmHello, OnHello},
                    Handler{kAmWriteData, OnWriteData}, Handler{kAmWriteAck, OnWriteAck},
                    Handler{kAmReadReq, OnReadReq}, Handler{kAmReadData, OnReadData}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = h.id;
    hp.cb = h.cb;
    hp.arg = this;
    KVF_RETURN_IF_ERROR(
        FromUcs(ucp_worker_set_am_recv_handler(worker_.get(), &hp), "set AM handler"));
  }
  host_id_ = HostIdentity();
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return UnavailableError("eventfd failed");
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void UcxBackend::Stop() {
  if (thread_.joinable()) {
    stop_ = true;
    Enqueue([] {});
    thread_.join();
  }
  if (event_fd_ >= 0) close(event_fd_);
  event_fd_ = -1;
  // Remaining handles go in order: rkeys (inside peers), then memory, worker, context.
  peers_.clear();
  for (auto& [id, r] : regions_) ucp_mem_unmap(context_.get(), r.memh);
  regions_.clear();
  worker_.reset();
  context_.reset();
}

unsigned UcxBackend::ProgressOnce() {
  unsigned n = 0;
  for (int i = 0; i < 64 && ucp_worker_progress(worker_.get()) != 0; ++i) ++n;
  while (!deferred_.empty()) {
    auto fn = std::move(deferred_.front());
    deferred_.pop_front();
    fn();
    ++n;
  }
  auto now = Clock::now();
  if (now - last_housekeeping_ > std::chrono::milliseconds(1)) {
    last_housekeeping_ = now;
    Housekeeping();
  }
  return n;
}

void UcxBackend::Drive(const std::shared_ptr<Completion>& c, Deadline until) {
  // The waiting thread progresses the worker itself: no hand-off to the progress thread on
  // the completion path. Between passes it sleeps on the worker's event fd (armed) rather than
  // spinning: on a machine with few cores a spinning waiter takes the CPU from the peer process
  // (or the progress thread) that must run for the transfer to finish, and every lost time
  // slice costs a scheduler tick (4 ms). With several drivers at once a completion may be
  // finished by another driver without waking this one, so they poll with a short timeout.
  int n = ++drivers_;
  pollfd fd{ucp_fd_, POLLIN, 0};
  while (true) {
    bool armed = false;
    {
      MutexLock l(&wmu_);
      ProgressOnce();
      if (c->done()) break;
      if (until.Expired()) break;
      armed = ucp_worker_arm(worker_.get()) == UCS_OK;
    }
    if (!armed) continue;  // events pending: progress again at once
    int64_t ms = std::clamp<int64_t>(until.RemainingMs(), 0, n > 1 ? 1 : kDriveSleepCapMs);
    poll(&fd, 1, static_cast<int>(ms));
    n = drivers_.load();
  }
  --drivers_;
}

void UcxBackend::Loop() {
  Clock::time_point last_busy = Clock::now();
  // After activity the thread busy-polls this long before it sleeps on the worker's event fd.
  // Short by default: on a 2-core host a spinning thread competes with the peer process.
  const char* spin_env = getenv("KVFERRY_UCX_SPIN_US");
  const auto spin_window = std::chrono::microseconds(spin_env ? std::atoll(spin_env) : 0);
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {ucp_fd_, POLLIN, 0}};
  while (true) {
    bool busy;
    bool waiting;  // transfers or closes in flight: wake often enough for deadlines/liveness
    {
      MutexLock l(&wmu_);
      std::deque<std::function<void()>> cmds;
      {
        MutexLock q(&mu_);
        cmds.swap(commands_);
      }
      for (auto& c : cmds) c();
      // While an application thread drives the worker (Drive), it alone progresses it: two
      // threads taking turns on one worker only steal each other's wake-ups.
      unsigned n = drivers_ > 0 ? 0 : ProgressOnce();
      if (stop_) break;
      busy = n > 0 || !cmds.empty();
      waiting = !xfers_.empty() || !inbound_.empty() || !closing_.empty();
    }
    if (drivers_ > 0) {  // stay out of the driver's way; commands still wake us
      poll(fds, 1, kDriveSleepCapMs);
      DrainEventFd();
      continue;
    }
    auto now = Clock::now();
    if (busy) {
      last_busy = now;
      continue;
    }
    if (now - last_busy < spin_window) continue;
    ucs_status_t st;
    {
      MutexLock l(&wmu_);
      st = ucp_worker_arm(worker_.get());
    }
    if (st == UCS_ERR_BUSY) continue;
    poll(fds, 2, waiting ? kWaitingSleepCapMs : 50);
    DrainEventFd();
  }
  // Shutdown (wmu_ still held by the loop's scope above is released by break; retake it).
  MutexLock l(&wmu_);
  for (auto& [id, p] : peers_) FailPeer(id, AbortedError("agent shutting down"));
  for (auto& [conn, b] : back_) CloseEp(b.ep, std::move(b.err_arg));
  back_.clear();
  auto until = Clock::now() + std::chrono::milliseconds(500);
  while (!closing_.empty() && Clock::now() < until) {
    ucp_worker_progress(worker_.get());
    Housekeeping();
  }
}

void UcxBackend::Housekeeping() {
  for (auto it = closing_.begin(); it != closing_.end();) {
    if (ucp_request_check_status(it->request) != UCS_INPROGRESS) {
      ucp_request_free(it->request);
      it = closing_.erase(it);  // the endpoint is gone: so is its error-callback argument
    } else {
      ++it;
    }
  }
  std::vector<std::pair<uint64_t, uint32_t>> expired;
  std::set<uint32_t> active_peers;
  for (auto& [token, x] : xfers_) {
    if (x->completion->deadline().Expired()) expired.push_back({token, x->peer_id});
    active_peers.insert(x->peer_id);
  }
  for (auto [token, peer_id] : expired) {
    CompleteXfer(token, DeadlineExceededError("transfer deadline passed (peer hung or slow)"));
    FailPeer(peer_id, DeadlineExceededError("a transfer to this peer timed out"));
  }
  auto now = Clock::now();
  if (now - last_liveness_ > std::chrono::milliseconds(100)) {
    last_liveness_ = now;
    for (uint32_t id : active_peers) {
      auto it = peers_.find(id);
      if (it != peers_.end() && it->second->same_host && ProcessIsDead(it->second->pid)) {
        FailPeer(id, UnavailableError("peer process " + std::to_string(it->second->pid) +
                                      " on this host died"));
      }
    }
  }
}

// ---- memory and metadata -------------------------------------------------------------------

StatusOr<void*> UcxBackend::DoRegister(uint32_t id, void* addr, uint64_t length) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.length = length;
  if (addr != nullptr) {
    mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.address = addr;
  } else {
    // UCX allocates, from the first method of UCX_MEM_ALLOC_METHODS that works: with the
    // shared-memory transports loaded, a sysv (or posix) segment that same-host peers can map.
    mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
  }
  ucp_mem_h memh = nullptr;
  KVF_RETURN_IF_ERROR(FromUcs(ucp_mem_map(context_.get(), &mp, &memh), "ucp_mem_map"));
  if (addr == nullptr) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if (ucp_mem_query(memh, &attr) != UCS_OK || attr.address == nullptr) {
      ucp_mem_unmap(context_.get(), memh);
      return InternalError("ucp_mem_query after ALLOCATE");
    }
    addr = attr.address;
  }
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  Status s = FromUcs(ucp_rkey_pack(context_.get(), memh, &rkey_buf, &rkey_len), "ucp_rkey_pack");
  if (!s.ok()) {
    ucp_mem_unmap(context_.get(), memh);
    return s;
  }
  regions_[id] = {static_cast<uint8_t*>(addr), length, memh,
                  std::string(static_cast<const char*>(rkey_buf), rkey_len)};
  ucp_rkey_buffer_release(rkey_buf);
  return addr;
}

// Backend blob: ucx_blob.h.
StatusOr<std::string> UcxBackend::LocalBlob() const {
  UcxBlob blob;
  Status s = RunSync([&] {
    blob.worker_address = worker_address_;
    blob.host_id = host_id_;
    blob.pid = static_cast<int64_t>(getpid());
    for (const auto& [id, r] : regions_) {
      blob.regions.push_back({id, reinterpret_cast<uint64_t>(r.base), r.rkey});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return EncodeUcxBlob(blob);
}

// ---- peers ---------------------------------------------------------------------------------

Status UcxBackend::AddPeer(uint32_t peer_id, const std::string& name, std::string_view blob) {
  KVF_ASSIGN_OR_RETURN(UcxBlob parsed, DecodeUcxBlob(blob));
  return RunSync([&] { return ConnectPeer(peer_id, name, parsed); });
}

Status UcxBackend::ConnectPeer(uint32_t peer_id, const std::string& name, const UcxBlob& blob) {
  auto p = std::make_unique<Peer>();
  p->id = peer_id;
  p->name = name;
  p->pid = blob.pid;
  p->same_host = blob.host_id == host_id_;
  p->use_am = UsesActiveMessages(p->same_host);
  KVF_RETURN_IF_ERROR(CreatePeerEndpoint(*p, blob.worker_address));
  Status s = UnpackRemoteKeys(*p, blob.regions);
  if (s.ok()) s = SendHello(*p);
  if (!s.ok()) {
    p->regions.clear();  // the rkeys go before their endpoint
    CloseEp(p->ep, std::move(p->err_arg));
    return s;
  }
  KVF_LOG_INFO("transfer: agent '{}' connected to '{}' ({}, data path {}): {}", ctx_.agent_name,
               name, p->same_host ? "same host" : "other host", p->use_am ? "AM" : "RMA",
               DescribeLanes(p->ep));
  {
    MutexLock l(&mu_);
    failed_peers_.erase(peer_id);
  }
  peers_[peer_id] = std::move(p);
  return Status::Ok();
}

bool UcxBackend::UsesActiveMessages(bool same_host) const {
  switch (ctx_.ucx.data_path) {
    case UcxDataPath::kRma:
      return false;
    case UcxDataPath::kActiveMessage:
      return true;
    case UcxDataPath::kAuto:
      return !same_host || ctx_.ucx.transport == UcxTransport::kTcp;
  }
  return false;
}

Status UcxBackend::CreatePeerEndpoint(Peer& p, const std::string& worker_address) {
  p.err_arg = std::make_unique<EpErrArg>(EpErrArg{this, p.id});
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  if (p.same_host && !p.use_am && getenv("KVFERRY_UCX_SHM_CMA") != nullptr) {
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;  // keeps the cma (single-copy) lane
  }
  ep.err_handler.cb = OnEpError;
  ep.err_handler.arg = p.err_arg.get();
  ucs_status_t st = ucp_ep_create(worker_.get(), &ep, &p.ep);
  if (st != UCS_OK) return FromUcs(st, "connect to '" + p.name + "' (ucp_ep_create)");
  return Status::Ok();
}

Status UcxBackend::UnpackRemoteKeys(Peer& p, const std::vector<UcxBlob::Region>& regions) {
  for (const UcxBlob::Region& r : regions) {
    ucp_rkey_h rk = nullptr;
    ucs_status_t st = ucp_ep_rkey_unpack(p.ep, r.rkey.data(), &rk);
    if (st != UCS_OK) {
      return InvalidArgumentError("invalid remote key of region " + std::to_string(r.id) +
                                  " from '" + p.name + "': " + ucs_status_string(st));
    }
    // A region the peer allocated as shared memory maps into this process (same host).
    void* mapped = nullptr;
    if (!p.same_host || ucp_rkey_ptr(rk, r.base, &mapped) != UCS_OK) mapped = nullptr;
    p.regions[r.id] = RemoteRegion{r.base, 0, UcpRkey(rk), static_cast<uint8_t*>(mapped)};
  }
  return Status::Ok();
}

Status UcxBackend::SendHello(Peer& p) {
  // Introduce ourselves: the target answers through an endpoint of its own (back channel).
  std::random_device rd;
  p.conn_id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(getpid()) << 20);
  std::string hello = std::string(reinterpret_cast<const char*>(&p.conn_id), 8) + worker_address_;
  size_t hello_len = hello.size();
  Status hs =
      SendAm(p.ep, kAmHello, "", nullptr, hello_len, std::move(hello), UCP_AM_SEND_FLAG_EAGER, {});
  return hs.ok() ? hs : hs.WithContext("connect to '" + p.name + "'");
}

void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* a = static_cast<EpErrArg*>(arg);
  UcxBackend* self = a->self;
  uint32_t id = a->peer_id;
  Status s = FromUcs(status, "connection to peer failed");
  // Runs inside ucp_worker_progress: defer the close.
  self->DeferFail(id, s);
}

void OnBackEpError(void* arg, ucp_ep_h, ucs_status_t) {
  auto* a = static_cast<BackErrArg*>(arg);
  a->self->DeferCloseBack(a->conn);
}

}  // namespace kvferry::transfer::ucx

namespace kvferry::transfer {
StatusOr<std::unique_ptr<Backend>> CreateUcxBackend(BackendContext context) {
  auto b = std::make_unique<ucx::UcxBackend>(std::move(context));
  KVF_RETURN_IF_ERROR(b->Start());
  return std::unique_ptr<Backend>(std::move(b));
}
}  // namespace kvferry::transfer
