// Value types of the transfer layer: memory kinds, region / peer / transfer handles,
// descriptors, transfer requests, notifications, the agent's counters.
//
// The transfer layer moves lists of byte ranges between registered memory of two agents. It
// knows nothing of tokens, layers or blocks (docs/transfer.md); a descriptor is (region, offset,
// length) on one side.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvferry::transfer {

// Where registered memory lives. kDevice is reserved for a CUDA build: registering it returns
// Unimplemented in this build.
enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

// READ: remote -> local. WRITE: local -> remote. Always seen from the initiator.
enum class XferOp : uint8_t { kRead = 0, kWrite = 1 };

std::string_view XferOpName(XferOp op);

// One registered contiguous memory area of an agent. Ids are assigned by the agent that
// registered the memory, are unique within it, and are carried in its metadata blob, so a peer
// addresses remote memory with the owner's RegionHandle values. 0 is never a valid id.
struct RegionHandle {
  uint32_t id = 0;
  friend bool operator==(RegionHandle, RegionHandle) = default;
};

// A remote agent whose metadata this agent has loaded. Local to the loading agent.
struct PeerHandle {
  uint32_t id = 0;
  friend bool operator==(PeerHandle, PeerHandle) = default;
};

// A prepared transfer. Local to the agent that prepared it.
struct XferHandle {
  uint64_t id = 0;
  friend bool operator==(XferHandle, XferHandle) = default;
};

// A byte range [offset, offset + length) of one region. length > 0.
struct Descriptor {
  RegionHandle region;
  uint64_t offset = 0;
  uint64_t length = 0;
};
using DescriptorList = std::vector<Descriptor>;

// What PrepareTransfer is asked to do. local[i] pairs with remote[i]; the two lists have the
// same number of entries and local[i].length == remote[i].length.
struct TransferRequest {
  XferOp op = XferOp::kRead;
  PeerHandle peer;
  DescriptorList local;   // regions of this agent
  DescriptorList remote;  // regions of the peer (the peer's RegionHandle ids)
  // Delivered to the peer (GetNotifications there) only after all bytes of the transfer are
  // visible in the peer's memory (WRITE) or have landed locally (READ). Empty: none sent.
  std::string notification;
  // Deadline of each Post, counted from Post. A transfer not done by then fails with
  // DeadlineExceeded and the peer's connection is force-closed (see agent.h).
  int64_t timeout_ms = 10'000;
};

// Progress of a posted transfer; failures are reported as a Status instead.
enum class XferState : uint8_t { kInProgress = 0, kDone = 1 };

// A notification received from a peer.
struct Notification {
  std::string peer_name;  // the sending agent's AgentOptions::name
  std::string message;
};

// Facts about a prepared transfer.
struct XferInfo {
  uint64_t total_bytes = 0;
  uint32_t num_descriptors_requested = 0;  // entries in TransferRequest::local
  uint32_t num_descriptors_merged = 0;     // after merging runs adjacent on both sides
  // Every remote region it touches is mapped into this process (UCX on one host, memory the
  // peer allocated with Agent::AllocateMemory): a Post is one memcpy by the caller.
  bool by_memcpy = false;
};

// An agent's counters since creation (Agent::Stats).
struct AgentStats {
  // What the backend refused from peers, by reason: inbound connections and frames it closed,
  // read and write ranges outside the registered regions, replies that do not match a request
  // (socket backend: every reason, zeros included; docs/reliability.md, "Hostile peers").
  // Other backends: empty.
  std::map<std::string, uint64_t> refused_inbound;
};

}  // namespace kvferry::transfer
