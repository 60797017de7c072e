// The narrow interface between the Agent and a transfer backend (NIXL's backend engine, cut
// down). The Agent owns validation, planning (merging) and handle tables; a backend owns the
// wire: connection info, remote keys, moving bytes, notifications. What crosses between peers is
// opaque bytes made by the backend.
//
// Thread-safety: every method may be called from any thread; backends synchronise internally.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/transfer/backend_options.h"
#include "kvferry/transfer/types.h"

namespace kvferry::transfer {

// One contiguous piece of a planned transfer, after validation and merging.
struct Segment {
  uint8_t* local_addr = nullptr;
  uint32_t local_region = 0;
  uint32_t remote_region = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

// The outcome of one Post, shared by the Agent (which polls it) and the backend (which
// finishes it, from any thread). The first Finish wins.
class Completion {
 public:
  explicit Completion(Deadline deadline) : deadline_(deadline) {}
  Deadline deadline() const { return deadline_; }

  void Finish(Status status) EXCLUDES(mu_);
  bool done() const EXCLUDES(mu_);
  // The final status; only meaningful once done().
  Status status() const EXCLUDES(mu_);
  // True once done, false if `deadline` passed first.
  bool WaitUntil(Deadline deadline) EXCLUDES(mu_);

 private:
  const Deadline deadline_;
  mutable Mutex mu_;
  CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
};

// What a backend is given at creation.
struct BackendContext {
  std::string agent_name;
  UcxOptions ucx;
  SocketOptions socket;
  // Called (from any backend thread) for every notification received.
  std::function<void(Notification)> deliver_notification;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Status RegisterMemory(uint32_t region_id, void* addr, uint64_t length) = 0;
  virtual Status DeregisterMemory(uint32_t region_id) = 0;
  // Allocates and registers `length` bytes that peers on this host can map (DeregisterMemory
  // frees them). Unimplemented: the Agent allocates ordinary memory and registers it instead.
  virtual StatusOr<void*> AllocateMemory(uint32_t /*region_id*/, uint64_t /*length*/) {
    return UnimplementedError("this backend has no shareable allocation");
  }

  // Connection info and the remote keys of the registered regions.
  virtual StatusOr<std::string> LocalBlob() const = 0;
  // Connects to a peer described by its blob. `peer_id` is chosen by the Agent, unique.
  virtual Status AddPeer(uint32_t peer_id, const std::string& peer_name, std::string_view blob) = 0;
  virtual void RemovePeer(uint32_t peer_id) = 0;
  // The peer's regions mapped into this process (UCX: memory the peer allocated as shared
  // memory, on this host): a transfer touching only these is one memcpy by the initiator.
  // Asked once, after AddPeer.
  virtual std::vector<uint32_t> MappedRegions(uint32_t /*peer_id*/) { return {}; }

  // Starts moving `segments`; finishes `completion` with OK once the bytes are visible at the
  // destination, then sends `notification` (if not empty). Errors may be returned at once or
  // through `completion`; the backend must finish it by its deadline.
  virtual Status Post(uint32_t peer_id, XferOp op, std::vector<Segment> segments,
                      std::string notification, std::shared_ptr<Completion> completion) = 0;
  // Blocks until `completion` is done or `until` passes, making progress on the calling thread
  // where the backend can (UCX); the default just waits.
  virtual void Drive(const std::shared_ptr<Completion>& completion, Deadline until) {
    completion->WaitUntil(until);
  }
  // Cancels a posted transfer (Release while in flight): finishes it with Aborted.
  virtual void Cancel(const std::shared_ptr<Completion>& completion) = 0;

  virtual Status SendNotification(uint32_t peer_id, std::string message) = 0;

  // The backend's counters (AgentStats); the default has none.
  virtual AgentStats Stats() const { return {}; }
};

StatusOr<std::unique_ptr<Backend>> CreateLoopbackBackend(BackendContext context);
StatusOr<std::unique_ptr<Backend>> CreateUcxBackend(BackendContext context);
StatusOr<std::unique_ptr<Backend>> CreateSocketBackend(BackendContext context);

}  // namespace kvferry::transfer
