// The agent metadata envelope: what GetLocalMetadata returns and LoadRemoteMetadata parses.
//
// Layout: msgpack array [magic "kvferry-xfer", version, backend name, agent name,
// [[region id, region length] ...], backend blob (bin)] followed by 8 bytes: FNV-1a 64 of the
// msgpack bytes, little-endian. The checksum is verified before anything is decoded; every
// decode error is InvalidArgument. Version 1. See docs/transfer.md.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::transfer {

struct RegionEntry {
  uint32_t id = 0;
  uint64_t length = 0;
};

struct AgentMetadata {
  std::string backend;
  std::string agent_name;
  std::vector<RegionEntry> regions;
  std::string backend_blob;
};

inline constexpr uint32_t kMetadataVersion = 1;

std::string EncodeMetadata(const AgentMetadata& md);
StatusOr<AgentMetadata> DecodeMetadata(std::string_view bytes);

uint64_t Fnv1a64(std::string_view bytes);

}  // namespace kvferry::transfer
