// Internal declarations of the UCX backend, shared by ucx_backend.cc (start-up, memory,
// metadata, progress loop) and ucx_datapath.cc (posting, active-message handlers, failures).
// See ucx_backend.cc for the design. Thread-safety: the public Backend methods may be called
// from any thread; everything else runs on the progress thread only.
#pragma once

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "transfer/backend.h"
#include "transfer/backends/ucx/ucx_blob.h"
#include "transfer/backends/ucx/ucx_util.h"

namespace kvferry::transfer::ucx {

using Clock = std::chrono::steady_clock;

enum AmId : unsigned {
  kAmNotify = 11,
  kAmHello,  // initiator -> target: connection id + worker address for the back channel
  kAmWriteData,
  kAmWriteAck,
  kAmReadReq,
  kAmReadData
};

struct WriteHdr {
  uint64_t conn;
  uint64_t token;
  uint64_t offset;
  uint32_t region;
  uint32_t nsegs;
};
struct AckHdr {
  uint64_t token;
  int32_t code;
};
struct ReadReqHdr {
  uint64_t conn;
  uint64_t token;
  uint32_t nsegs;
};
struct ReadEntry {
  uint64_t offset;
  uint64_t length;
  uint64_t dest;
  uint32_t region;
  uint32_t pad;
};
struct ReadDataHdr {
  uint64_t token;
  uint64_t dest;
  int32_t code;
};

struct LocalRegion {
  uint8_t* base;
  uint64_t length;
  ucp_mem_h memh;
  std::string rkey;
};

struct RemoteRegion {
  uint64_t base;
  uint64_t length;
  UcpRkey rkey;
  uint8_t* mapped = nullptr;  // the region in our address space (ucp_rkey_ptr), or null
};

class UcxBackend;

// Arguments of the endpoint error callbacks. UCX keeps the pointer for the endpoint's whole
// life, which ends when its close request completes (ucp_ep_close_nbx may finish later, during
// progress). So each argument is owned by its endpoint's Peer or BackChannel while the endpoint
// is open, then by the ClosingEp until the close completes, and freed there: nothing else owns
// one, and none outlives its endpoint (a long-running instance meets thousands of peers).
struct EpErrArg {
  UcxBackend* self;
  uint32_t peer_id;
};
struct BackErrArg {
  UcxBackend* self;
  uint64_t conn;
};

// An endpoint being closed: the close request (in progress) and the error-callback argument
// that must live until the request completes.
struct ClosingEp {
  void* request;
  std::shared_ptr<const void> err_arg;
};

struct Peer {
  uint32_t id;
  uint64_t conn_id = 0;  // names this connection at the target (back channel)
  std::string name;
  ucp_ep_h ep = nullptr;
  std::unique_ptr<EpErrArg> err_arg;  // ep's error-callback argument, while ep is open
  bool same_host = false;
  int64_t pid = 0;
  bool use_am = false;
  bool failed = false;
  std::map<uint32_t, RemoteRegion> regions;
};

struct Xfer {
  uint64_t token;
  uint32_t peer_id;
  XferOp op;
  std::vector<Segment> segs;
  std::string notification;
  std::shared_ptr<Completion> completion;
  uint32_t remaining = 0;  // AM READ: segments still to land
};

// Target side: the endpoint back to an initiator, created from the address in its hello. Our own
// endpoint (not UCX's reply endpoint), so that its failure is reported to us and it is never
// destroyed behind our back.
struct BackChannel {
  std::string address;
  ucp_ep_h ep = nullptr;
  std::unique_ptr<BackErrArg> err_arg;  // ep's error-callback argument, while ep is open
};

// Target-side state of an AM WRITE in progress, keyed by (connection id, token).
struct InboundWrite {
  uint32_t expected = 0;
  uint32_t received = 0;
  int32_t code = 0;
};

struct RecvCtx {
  UcxBackend* self;
  std::function<void(ucs_status_t)> done;
};

class UcxBackend final : public Backend {
 public:
  explicit UcxBackend(BackendContext ctx) : ctx_(std::move(ctx)) {}
  ~UcxBackend() override { Stop(); }

  Status Start();
  void Stop();
  // From the endpoint error callback (inside ucp_worker_progress): fail the peer afterwards.
  void DeferFail(uint32_t peer_id, Status s) {
    deferred_.push_back([this, peer_id, s] { FailPeer(peer_id, s); });
  }
  void DeferCloseBack(uint64_t conn) {
    deferred_.push_back([this, conn] { CloseBack(conn); });
  }

  Status RegisterMemory(uint32_t id, void* addr, uint64_t length) override {
    return RunSync([&] { return DoRegister(id, addr, length).status(); });
  }
  StatusOr<void*> AllocateMemory(uint32_t id, uint64_t length) override {
    void* addr = nullptr;
    KVF_RETURN_IF_ERROR(RunSync([&] {
      auto a = DoRegister(id, nullptr, length);
      if (a.ok()) addr = *a;
      return a.status();
    }));
    return addr;
  }
  Status DeregisterMemory(uint32_t id) override {
    return RunSync([&] {
      auto it = regions_.find(id);
      if (it != regions_.end()) {
        ucp_mem_unmap(context_.get(), it->second.memh);
        regions_.erase(it);
      }
      return Status::Ok();
    });
  }
  StatusOr<std::string> LocalBlob() const override;
  Status AddPeer(uint32_t peer_id, const std::string& name, std::string_view blob) override;
  void RemovePeer(uint32_t peer_id) override {
    RunSync([&] {
      FailPeer(peer_id, AbortedError("peer removed"));
      peers_.erase(peer_id);
      return Status::Ok();
    }).IgnoreError();
  }
  std::vector<uint32_t> MappedRegions(uint32_t peer_id) override {
    std::vector<uint32_t> out;
    RunSync([&] {
      auto it = peers_.find(peer_id);
      if (it == peers_.end()) return Status::Ok();
      for (const auto& [id, r] : it->second->regions) {
        if (r.mapped != nullptr) out.push_back(id);
      }
      return Status::Ok();
    }).IgnoreError();
    return out;
  }
  Status Post(uint32_t peer_id, XferOp op, std::vector<Segment> segs, std::string notification,
              std::shared_ptr<Completion> completion) override {
    {
      MutexLock l(&mu_);
      if (failed_peers_.count(peer_id)) {
        return UnavailableError("connection to peer has failed; load its metadata again");
      }
    }
    auto x = std::make_shared<Xfer>();
    x->peer_id = peer_id;
    x->op = op;
    x->segs = std::move(segs);
    x->notification = std::move(notification);
    x->completion = std::move(completion);
    MutexLock l(&wmu_);  // posted inline by the caller's thread: no hand-off
    DoPost(x);
    return Status::Ok();
  }
  void Drive(const std::shared_ptr<Completion>& c, Deadline until) override;
  void Cancel(const std::shared_ptr<Completion>& c) override {
    Enqueue([this, c] {
      for (auto it = xfers_.begin(); it != xfers_.end(); ++it) {
        if (it->second->completion == c) {
          xfers_.erase(it);
          return;
        }
      }
    });
  }
  // Endpoint error-callback arguments alive now (tests: none may outlive its endpoint).
  size_t NumErrorCallbackArgsForTesting() const {
    size_t n = 0;
    RunSync([&] {
      for (const auto& [id, p] : peers_) n += p->err_arg != nullptr;
      for (const auto& [conn, b] : back_) n += b.err_arg != nullptr;
      for (const ClosingEp& c : closing_) n += c.err_arg != nullptr;
      return Status::Ok();
    }).IgnoreError();
    return n;
  }
  Status SendNotification(uint32_t peer_id, std::string message) override {
    return RunSync([&] {
      auto it = peers_.find(peer_id);
      if (it == peers_.end() || it->second->failed) return UnavailableError("peer not connected");
      return SendNotif(*it->second, message);
    });
  }

 private:
  // ---- threading ----
  void Enqueue(std::function<void()> fn) {
    {
      MutexLock l(&mu_);
      commands_.push_back(std::move(fn));
    }
    uint64_t one = 1;
    ssize_t r = write(event_fd_, &one, sizeof(one));
    (void)r;
  }
  Status RunSync(std::function<Status()> fn) const {
    auto p = std::make_shared<std::promise<Status>>();
    auto f = p->get_future();
    const_cast<UcxBackend*>(this)->Enqueue([p, fn = std::move(fn)] { p->set_value(fn()); });
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return DeadlineExceededError("UCX progress thread did not answer within 30 s");
    }
    return f.get();
  }
  void Loop();
  void DrainEventFd() {
    uint64_t v;
    while (read(event_fd_, &v, sizeof(v)) > 0) {
    }
  }
  // Longest sleep of a driver, and of the progress thread while transfers are in flight, on
  // the worker's event fd: a backstop for a missed wake-up and the pace of deadline checks.
  static constexpr int kDriveSleepCapMs = 2;
  static constexpr int kWaitingSleepCapMs = 5;
  unsigned ProgressOnce();  // one pass: worker progress, deferred work, housekeeping
  void Housekeeping();

  // ---- progress-thread work ----
  // Maps [addr, addr + length) (addr null: UCX allocates shareable memory) and packs its rkey;
  // returns the region's address.
  StatusOr<void*> DoRegister(uint32_t id, void* addr, uint64_t length);
  // READ/WRITE with every remote region mapped into this process: memcpy, then the notification.
  void PostMapped(Peer& p, const std::shared_ptr<Xfer>& x);
  void DoPost(const std::shared_ptr<Xfer>& x);
  // AddPeer's work: the endpoint, the peer's remote keys, the hello. The peer is known (and
  // no longer failed) only once all three worked; otherwise what was made is closed again.
  Status ConnectPeer(uint32_t peer_id, const std::string& name, const UcxBlob& blob);
  bool UsesActiveMessages(bool same_host) const;  // the data path chosen for a peer
  Status CreatePeerEndpoint(Peer& p, const std::string& worker_address);
  Status UnpackRemoteKeys(Peer& p, const std::vector<UcxBlob::Region>& regions);
  Status SendHello(Peer& p);
  void PostRma(Peer& p, const std::shared_ptr<Xfer>& x);
  void PostAm(Peer& p, const std::shared_ptr<Xfer>& x);
  void CompleteXfer(uint64_t token, Status s);
  void FailPeer(uint32_t peer_id, Status s);
  Status SendNotif(Peer& p, const std::string& message);
  // Sends an active message whose header (and owned payload, if any) live until completion.
  // `data` points into `owned` or into registered user memory. on_done may be empty.
  Status SendAm(ucp_ep_h ep, unsigned id, std::string header, const void* data, size_t length,
                std::string owned, uint32_t flags, std::function<void(ucs_status_t)> on_done);
  void DataLanded(uint64_t token);
  void Receive(void* data, size_t length, const ucp_am_recv_param_t* param, uint8_t* dest,
               std::function<void(ucs_status_t)> done, ucs_status_t* ret);
  void SendAck(uint64_t conn, uint64_t token, int32_t code);
  void FinishInbound(uint64_t conn, uint64_t token, ucs_status_t st);
  // The back-channel endpoint for `conn`, created on first use; null if `conn` is unknown (no
  // hello, or its back channel failed and was closed).
  ucp_ep_h BackEp(uint64_t conn);
  // Closes the back channel of `conn` and forgets it, with its writes in progress.
  void CloseBack(uint64_t conn);
  // Starts closing `ep` (forced); `err_arg`, its error-callback argument, is freed once the
  // close has completed.
  void CloseEp(ucp_ep_h ep, std::shared_ptr<const void> err_arg);
  const LocalRegion* FindRegion(uint32_t id, uint64_t offset, uint64_t length) const {
    auto it = regions_.find(id);
    if (it == regions_.end() || offset > it->second.length || length > it->second.length - offset) {
      return nullptr;
    }
    return &it->second;
  }

  static ucs_status_t OnHello(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                              const ucp_am_recv_param_t* param);
  static ucs_status_t OnNotify(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                               const ucp_am_recv_param_t* param);
  static ucs_status_t OnWriteData(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                  const ucp_am_recv_param_t* param);
  static ucs_status_t OnWriteAck(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                 const ucp_am_recv_param_t* param);
  static ucs_status_t OnReadReq(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                const ucp_am_recv_param_t* param);
  static ucs_status_t OnReadData(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                 const ucp_am_recv_param_t* param);

  const BackendContext ctx_;
  UcpContext context_;
  UcpWorker worker_;
  std::string worker_address_;
  std::string host_id_;
  int event_fd_ = -1;
  int ucp_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Held by whichever thread touches the worker and the state below (the progress thread, or an
  // application thread inside Post or Drive). The worker is UCS_THREAD_MODE_SERIALIZED.
  Mutex wmu_ ACQUIRED_BEFORE(mu_);
  std::atomic<int> drivers_{0};  // application threads inside Drive

  Mutex mu_;
  std::deque<std::function<void()>> commands_ GUARDED_BY(mu_);
  std::set<uint32_t> failed_peers_ GUARDED_BY(mu_);

  // Under wmu_ (not annotated: reached from UCX callbacks the analysis cannot follow).
  std::map<uint32_t, LocalRegion> regions_;
  std::map<uint32_t, std::unique_ptr<Peer>> peers_;
  std::map<uint64_t, std::shared_ptr<Xfer>> xfers_;
  std::map<std::pair<uint64_t, uint64_t>, InboundWrite> inbound_;
  std::map<uint64_t, BackChannel> back_;
  std::deque<std::function<void()>> deferred_;  // sends issued after ucp_worker_progress returns
  std::vector<ClosingEp> closing_;              // endpoint closes still in progress
  uint64_t next_token_ = 1;
  Clock::time_point last_housekeeping_{};
  Clock::time_point last_liveness_{};
};

void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
void OnBackEpError(void* arg, ucp_ep_h ep, ucs_status_t status);

}  // namespace kvferry::transfer::ucx
