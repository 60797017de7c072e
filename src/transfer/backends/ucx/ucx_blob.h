// The UCX backend's part of the agent metadata (the backend blob inside the versioned,
// checksummed envelope of src/transfer/metadata.h): what a peer needs to reach this agent and
// its memory. UcxBackend::LocalBlob encodes it; UcxBackend::AddPeer decodes the peer's.
//
// msgpack: [worker address (bin), host identity (str), pid (int), [[id, base, rkey (bin)]...]]
//   worker address  ucp_worker_get_address: the peer's endpoint connects to it
//   host identity   HostIdentity(): equal on both sides means "same host" (shared memory,
//                   mapped regions, the pid liveness check)
//   pid             the agent's process, checked for death when on the same host
//   regions         each registered region's id, base address and packed remote key
// The envelope's checksum catches damaged bytes; this decoder catches a blob of the wrong
// shape or cut short (InvalidArgument), never reading past the bytes it was given. Bytes after
// a whole blob are ignored (as msgpack::unpack does); the envelope covers them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::transfer::ucx {

struct UcxBlob {
  struct Region {
    uint32_t id = 0;
    uint64_t base = 0;  // the region's address in the owner's process
    std::string rkey;   // ucp_rkey_pack's bytes
  };
  std::string worker_address;
  std::string host_id;
  int64_t pid = 0;
  std::vector<Region> regions;
};

std::string EncodeUcxBlob(const UcxBlob& blob);
// InvalidArgument ("UCX metadata: ...") for bytes that do not start with a whole blob of the
// shape above.
StatusOr<UcxBlob> DecodeUcxBlob(std::string_view bytes);

}  // namespace kvferry::transfer::ucx
