// Agent: the transfer layer's entry point, one per process (or per TP rank), after NIXL's agent.
//
//   Agent a = *Agent::Create({.name = "decode-0"});
//   RegionHandle r = *a.RegisterMemory(buf, len, MemoryKind::kHost);
//   std::string blob = *a.GetLocalMetadata();           // send to peers out of band
//   PeerHandle p = *a.LoadRemoteMetadata(peer_blob);    // blob from the peer
//   XferHandle x = *a.PrepareTransfer({.op = XferOp::kRead, .peer = p,
//                                      .local = {{r, 0, 4096}}, .remote = {{pr, 0, 4096}},
//                                      .notification = "req-17", .timeout_ms = 2000});
//   KVF_RETURN_IF_ERROR(a.Post(x));
//   KVF_RETURN_IF_ERROR(a.Wait(x, Deadline::AfterMs(5000)));   // or Poll(x) in a loop
//   KVF_RETURN_IF_ERROR(a.Release(x));
//
// Lifecycle of a transfer: PrepareTransfer (validates every descriptor, merges runs adjacent on
// both sides; nothing is sent) -> Post -> Poll/Wait until kDone or an error -> Post again (same
// descriptors, new deadline) or Release. Release of a transfer that is still in flight cancels
// it; its local and remote memory may still be written by the transport until the peer is
// closed, so neither side may reuse that memory on the strength of Release alone (poisoning
// rule, docs/transfer.md).
//
// Failures: every failure becomes a Status within the transfer's deadline, never a hang:
//   InvalidArgument   bad descriptors (length mismatch, out of region bounds), garbage
//                     metadata; returned by PrepareTransfer / LoadRemoteMetadata, nothing posted
//   NotFound          unknown region, peer or transfer handle (e.g. a remote region the peer
//                     never registered: an invalid remote key)
//   FailedPrecondition Post of a transfer already in flight; use of a failed peer
//   Unavailable       the peer died or its connection broke
//   DeadlineExceeded  the transfer's timeout_ms passed (e.g. the peer hangs)
// After Unavailable or DeadlineExceeded the connection to that peer is force-closed; later
// transfers to it fail with Unavailable until its metadata is loaded again.
//
// Backends: UCX (shared memory within a host, TCP across hosts; docs/transfer.md) and loopback
// (in-process copy between agents of one process, for tests; see loopback.h). An agent has one
// backend; both peers must use the same one.
//
// Thread-safety: every method may be called from any thread concurrently, except that one
// XferHandle is driven (Post / Poll / Wait / Release) by one thread at a time. Internally the
// UCX backend runs one progress thread that owns the UCX worker; it delivers notifications and
// serves the peers' requests even when the application never calls Poll.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/transfer/backend_options.h"
#include "kvferry/transfer/types.h"

namespace kvferry::transfer {

// The backend kinds and each backend's options are in backend_options.h.
struct AgentOptions {
  std::string name;  // required; unique among the agents that exchange metadata
  BackendKind backend = BackendKind::kUcx;
  UcxOptions ucx;
  SocketOptions socket;
};

// What Agent::AllocateMemory returns.
struct AllocatedMemory {
  RegionHandle region;
  void* addr = nullptr;
};

class Backend;  // internal (src/transfer/backend.h)

class Agent {
 public:
  // Creates the agent and its backend (UCX: context, worker, progress thread).
  // InvalidArgument for an empty name; Unavailable if the backend cannot start.
  static StatusOr<std::unique_ptr<Agent>> Create(const AgentOptions& options);
  ~Agent();  // stops the progress thread, closes peers, deregisters memory
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  const std::string& name() const { return name_; }

  // Registers [addr, addr + length) for transfers. The memory must stay valid until
  // DeregisterMemory or the agent's destruction. MemoryKind::kDevice: Unimplemented.
  // Register before GetLocalMetadata: peers only see regions present in the blob they loaded.
  StatusOr<RegionHandle> RegisterMemory(void* addr, uint64_t length, MemoryKind kind);
  // NotFound if unknown. Prepared transfers that name the region fail on their next Post.
  // Memory from AllocateMemory is freed here.
  Status DeregisterMemory(RegionHandle region);

  // Allocates `length` bytes (page-aligned, zeroed) owned by the agent, and registers them.
  // With UCX the memory is shared memory (ucp_mem_map ALLOCATE) that a peer on this host maps
  // into its address space when it loads this agent's metadata; that peer's READs from and
  // WRITEs to it are then one memcpy by the initiator, at memory speed, with no work by this
  // process (docs/transfer.md, "Mapped regions"). Other backends, or UCX when the shared
  // allocation fails (logged): ordinary memory. Valid until DeregisterMemory or the agent's
  // destruction.
  StatusOr<AllocatedMemory> AllocateMemory(uint64_t length);

  // Opaque bytes for peers: agent name, backend connection info (UCX worker address), and the
  // region table with the packed remote keys. Versioned and checksummed (docs/transfer.md).
  StatusOr<std::string> GetLocalMetadata() const;

  // Loads a peer's metadata and connects to it (UCX: creates the endpoint, logs its lanes).
  // InvalidArgument on garbage, a checksum mismatch or another backend's blob; loading the same
  // agent name again replaces the old connection (and fails its transfers).
  StatusOr<PeerHandle> LoadRemoteMetadata(std::string_view metadata);
  // Forgets a peer: its in-flight transfers fail with Aborted. NotFound if unknown.
  Status RemovePeer(PeerHandle peer);
  // The peer's AgentOptions::name. NotFound if unknown.
  StatusOr<std::string> PeerName(PeerHandle peer) const;

  // Validates and plans a transfer; nothing is sent. Checks, in order: peer known; list sizes
  // equal and non-empty; each pair's lengths equal and > 0; each local descriptor inside a
  // local region and each remote one inside the peer's region (InvalidArgument; NotFound for a
  // region id that does not exist). Merges pairs adjacent on both sides into one descriptor.
  StatusOr<XferHandle> PrepareTransfer(const TransferRequest& request);
  // Facts about a prepared transfer (descriptor count after merging ...). NotFound if unknown.
  StatusOr<XferInfo> GetXferInfo(XferHandle xfer) const;

  // Starts the transfer; its deadline is now + timeout_ms. FailedPrecondition if in flight.
  // Unavailable if the peer's connection has failed.
  Status Post(XferHandle xfer);
  // kInProgress or kDone, or the transfer's failure. Does not block: one progress pass on the
  // calling thread (UCX), besides the backend's own progress thread.
  StatusOr<XferState> Poll(XferHandle xfer);
  // Blocks until done, failed, or `deadline` (DeadlineExceeded; the transfer continues and
  // keeps its own deadline). Progresses the transfer on the calling thread (UCX), so the
  // completion path needs no thread hand-off.
  Status Wait(XferHandle xfer, Deadline deadline);
  // Forgets the transfer, cancelling it if in flight (see the poisoning rule above).
  Status Release(XferHandle xfer);

  // Sends `message` to the peer as a notification on its own (not tied to a transfer).
  Status SendNotification(PeerHandle peer, std::string_view message);
  // Drains the notifications received so far, in arrival order per peer.
  std::vector<Notification> GetNotifications();
  // Blocks until at least one notification is queued or `deadline` passes, then drains. Returns
  // an empty vector on timeout.
  std::vector<Notification> WaitNotifications(Deadline deadline);

  // Counters since creation: what the backend refused from peers, by reason (AgentStats).
  AgentStats Stats() const;

 private:
  struct Impl;
  Agent(std::string name, std::unique_ptr<Impl> impl);
  std::string name_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvferry::transfer
