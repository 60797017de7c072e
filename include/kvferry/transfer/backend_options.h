// Which transfer backend an agent uses, and the options of each backend: the part of
// AgentOptions (agent.h) that the backends themselves are given (src/transfer/backend.h's
// BackendContext). A header of its own so that the backend interface does not include the user
// API it sits beneath; agent.h includes it, so user code names these types through agent.h.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::transfer {

// kUcx: UCX (shared memory on this host, TCP across hosts). kLoopback: in-process copies, for
// tests. kSocket: kvferry's own TCP data path (docs/transfer.md, "Socket backend"): the target
// sends straight from registered memory and the initiator receives straight into it, one kernel
// copy at each end as a plain TCP stream has, where UCX 1.13 over TCP adds a user-space copy.
enum class BackendKind : uint8_t { kUcx = 0, kLoopback = 1, kSocket = 2 };

// "ucx", "loopback", "socket": the names in metadata blobs and in kv_connector_extra_config.
std::string_view BackendKindName(BackendKind kind);
// The kind of a name above ("UCX" also); InvalidArgument naming the choices otherwise.
StatusOr<BackendKind> ParseBackendKind(std::string_view name);

// Which UCX transports the agent's context may use. UCX_TLS in the environment, when set,
// always wins over this.
enum class UcxTransport : uint8_t {
  kAuto = 0,  // shared memory to peers on this host, TCP to others
  kTcp = 1,   // TCP only (also to peers on this host)
  kShm = 2,   // shared memory only (peers on this host only)
};
// "auto", "tcp", "shm": the names in kv_connector_extra_config and the Python agent.
std::string_view UcxTransportName(UcxTransport transport);
// The transport of a name above; InvalidArgument naming the choices otherwise.
StatusOr<UcxTransport> ParseUcxTransport(std::string_view name);

// How bytes move over an endpoint. kAuto: one-sided put/get where the transport does RMA well
// (shared memory), active messages with rendezvous where UCX only emulates RMA (TCP).
enum class UcxDataPath : uint8_t { kAuto = 0, kRma = 1, kActiveMessage = 2 };

struct UcxOptions {
  UcxTransport transport = UcxTransport::kAuto;
  UcxDataPath data_path = UcxDataPath::kAuto;
};

// The socket backend's listener: peers connect to listen_host:listen_port (0: any free port).
// listen_host must be an address peers can reach; it is published in the metadata.
struct SocketOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;
};

// The loopback backend has no options; its fault injection is in loopback.h.

}  // namespace kvferry::transfer
