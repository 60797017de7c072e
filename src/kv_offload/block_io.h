// File I/O of the disk tier (internal to kv_offload): an atomic write of one block file and
// whole / leading reads, with errno in every error. No retries and no fsync: a file is written to
// a temporary name and renamed, so a crash leaves either no file, a temporary one (deleted at the
// next Open) or, after a power loss, one whose checksum fails (a miss).
//
// Thread-safety: pure functions of the file system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::kv_offload {

// Writes head, payload and tail to `path` + ".tmp", then renames it to `path`. On error the
// temporary file is gone and `path` is untouched: Unavailable naming the call and errno
// (ENOSPC: "No space left on device").
Status WriteFileAtomically(const std::string& path, std::string_view head,
                           std::span<const std::byte> payload, std::string_view tail);

// The whole file, or its first `max_bytes` when it is longer. NotFound when it does not exist,
// Unavailable on other errors.
StatusOr<std::vector<std::byte>> ReadFileStart(const std::string& path, uint64_t max_bytes);

// The file's size; NotFound / Unavailable as above.
StatusOr<uint64_t> FileSize(const std::string& path);

}  // namespace kvferry::kv_offload
