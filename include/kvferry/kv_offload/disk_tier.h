// DiskTier: KV blocks kept in local files beyond the RAM of an instance's block pool
// (docs/kv_offload.md). The engine writes every full block it computes here (write-through, so a
// block evicted from RAM is already on disk) and reads blocks back on a prefix hit; the files
// outlive the process, so a restarted instance starts with them.
//
// Content-addressed: one file per block, named by its chain hash, under a directory per (salt,
// layout) — another model, hash seed, dtype, block size or TP size never reads these files.
// Each file carries the whole prefix it was computed for and a checksum (block_file.h): Get
// compares the prefix with the caller's and verifies the checksum, so a torn, truncated or
// corrupt file, or a 64-bit hash collision, is a miss (the damaged file is deleted), never wrong
// bytes.
//
// Writes are asynchronous, on the tier's own thread, in Put order; a block is found (Contains,
// Get) from the moment it is queued. Capacity: files are evicted least recently used first to
// keep their total at most capacity_bytes. A write that fails (a full disk, an I/O error)
// pauses offloading for pause_after_error_ms — the queued writes and Puts until then are dropped
// and counted — and never fails a Get or the caller: the disk tier can only cost misses.
// Queued writes beyond max_pending_bytes are dropped (counted) rather than grow memory.
//
// Events (record_events): BlockStored when a block's file is committed (or found at Open),
// BlockRemoved when it is evicted or found damaged, all with Tier::kDisk; TakeEvents hands them
// over.
//
// Thread-safety: every method may be called from any thread; Open/~DiskTier once. The
// destructor finishes the queued writes (at most max_pending_bytes) before it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_events.h"

namespace kvferry::kv_offload {

struct DiskTierOptions {
  std::string dir;              // root directory; created when missing
  uint64_t capacity_bytes = 0;  // the files' total size at most (> 0)
  int32_t block_size = 0;       // tokens per block (> 0)
  uint64_t salt = 0;            // the chain hashes' salt
  uint64_t layout = 0;          // what the payload's bytes are laid out for (the caller's key)
  uint64_t max_pending_bytes = uint64_t{256} << 20;
  int64_t pause_after_error_ms = 30'000;
  bool record_events = false;
};

struct DiskTierStats {
  int64_t files = 0;
  int64_t bytes = 0;  // on disk, committed files
  int64_t capacity_bytes = 0;
  int64_t pending_bytes = 0;  // queued, not written yet
  int64_t stored = 0;         // files written
  int64_t loaded = 0;         // Gets that returned a block
  int64_t corrupt = 0;        // damaged files found (at Open or by Get) and deleted
  int64_t evicted = 0;        // files deleted to stay within capacity
  int64_t write_errors = 0;   // failed writes (each pauses offloading)
  int64_t dropped = 0;        // Puts not written: paused, queue full, or larger than capacity
  bool paused = false;        // offloading paused after a write error
};

class DiskTier {
 public:
  // Creates the directory, deletes half-written files a crash left, and indexes the blocks
  // already there (checking each header; a file whose header or size is wrong is deleted and
  // counted as corrupt). InvalidArgument for bad options, Unavailable when the directory cannot
  // be created or read.
  static StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Whether block `hash` is on disk or queued for writing.
  bool Contains(uint64_t hash) const;

  // Queues block `hash` (prefix `prefix_tokens`, whole blocks; its parent's hash unless it is
  // the first block) for writing. False when dropped (see above) or already there.
  bool Put(uint64_t hash, std::optional<uint64_t> parent, std::span<const int32_t> prefix_tokens,
           std::vector<std::byte> payload);

  // The payload of block `hash` computed for `prefix_tokens`. NotFound when there is no such
  // block (or the file is another prefix's); DataLoss when its file was damaged (deleted now).
  StatusOr<std::vector<std::byte>> Get(uint64_t hash, std::span<const int32_t> prefix_tokens);

  // Waits until the queued writes are done, `timeout_ms` at most; false on timeout.
  bool Flush(int64_t timeout_ms);

  std::vector<kv::BlockEvent> TakeEvents();
  DiskTierStats Stats() const;
  // Where this tier's files are: dir/<salt>-<layout> in hex.
  const std::string& directory() const;

 private:
  struct State;
  explicit DiskTier(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvferry::kv_offload
