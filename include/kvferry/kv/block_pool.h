// BlockPool: the logical blocks of one instance's KV cache, with ref counts, an LRU free queue,
// a prefix cache over full blocks, holds for remote readers, and exact accounting.
//
// Every block is in exactly one of these states:
//   in use   ref_count > 0; not in the free queue. A block whose refs include holds (Hold) is
//            also counted as `held`.
//   free     ref_count == 0; in the free queue. A free block that still carries a prefix-cache
//            entry is also counted as `cached`: its contents stay valid and FindCachedPrefix may
//            return it until Allocate evicts it.
// So stats: total == free + in_use, cached <= free, held <= in_use.
//
// Free queue: Allocate pops from the head (least recently freed first); a block whose ref count
// drops to 0 goes to the tail. Free(ids) walks `ids` back to front, so a request's tail blocks
// are evicted before its head blocks (as vLLM does): the prefix survives longest.
//
// Prefix cache: the hash of full block i is H(salt, hash of block i-1, tokens of block i) (a
// 64-bit chain). Each cache entry also stores its tokens and the identity of its parent entry;
// FindCachedPrefix compares them on every hit, so a hash collision can never return wrong KV.
//
// Generation(id): a counter bumped every time the block's ref count drops to 0 and every time
// Allocate hands it out again. A reader that leased a block records the generation and checks
// it after reading: a change means the block may have been reused (connector lease safety).
//
// Errors: calls that take ids validate all of them first and change nothing when one is bad
// (FailedPrecondition / OutOfRange, naming the block); then apply the whole call. Internal
// consistency (free-queue membership, ref counts) is checked as it is used, in release builds
// too (KVF_CHECK: a broken pool aborts rather than hands a block to two requests), and can be
// checked whole at any time with CheckInvariants().
//
// Events (block_events.h): with BlockPoolOptions::record_events, every entry that CacheFullBlocks
// registers is recorded as stored (one event per call, in chain order) and every entry dropped —
// evicted by Allocate, or by InvalidateCached — as removed (consecutive drops in one event);
// TakeEvents() returns them in order and empties the record.
//
// Thread-safety: NOT thread-safe. The pool is externally synchronized: it belongs to the engine
// thread (scheduler), which makes every call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_events.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::kv {

struct BlockPoolOptions {
  int32_t num_blocks_logical = 0;  // N: ids are 0 .. N-1
  int32_t block_size_logical = 0;  // tokens per logical block (what "full" means)
  uint64_t hash_salt = 0;          // per model/pool; mixed into the root of every chain
  bool record_events = false;      // keep BlockEvents for TakeEvents()
};

struct BlockPoolStats {
  int32_t total = 0;   // N
  int32_t free = 0;    // ref_count == 0 (in the free queue), cached or not
  int32_t in_use = 0;  // ref_count > 0, including held
  int32_t cached = 0;  // free and carrying a prefix-cache entry
  int32_t held = 0;    // in use with at least one hold
  friend bool operator==(const BlockPoolStats&, const BlockPoolStats&) = default;
};

// Chain hash of one full block: H(salt, parent, tokens). `parent` is 0 for the first block.
BlockHash HashBlockTokens(uint64_t salt, BlockHash parent, std::span<const int32_t> tokens);
// The chain hashes of the whole blocks of `tokens` (block_size_logical each), the first one's
// parent being `parent` (0: the chain starts here): what the pool registers them under.
std::vector<BlockHash> ChainHashes(uint64_t salt, BlockHash parent, int32_t block_size_logical,
                                   std::span<const int32_t> tokens);

class BlockPool {
 public:
  // InvalidArgument when a size is not positive.
  static StatusOr<BlockPool> Create(const BlockPoolOptions& options);

  BlockPool(BlockPool&&) = default;
  BlockPool& operator=(BlockPool&&) = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks_logical() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size_logical() const { return options_.block_size_logical; }
  uint64_t hash_salt() const { return options_.hash_salt; }

  // The longest run of cached full blocks matching the start of `tokens`: element i is the block
  // holding tokens [i*B, (i+1)*B). Only full blocks are considered. Changes nothing: the caller
  // Touch()es the hits it keeps (whether to recompute the last prompt token is its policy).
  std::vector<LogicalBlockId> FindCachedPrefix(std::span<const int32_t> tokens) const;

  // `n` fresh blocks with ref_count 1, popped from the head of the free queue (evicting their
  // cache entries). All or nothing: ResourceExhausted when fewer than `n` blocks are free.
  StatusOr<std::vector<LogicalBlockId>> Allocate(int32_t n);

  // ref++ of each id. A free id must be cached (a prefix hit): it leaves the free queue. An id
  // may repeat (ref += multiplicity). FailedPrecondition (nothing changed) when an id is free
  // and not cached — its contents are garbage.
  Status Touch(std::span<const LogicalBlockId> ids);

  // Registers prefix-cache entries for blocks [0, num_full_blocks) of a request whose block
  // table is `ids` and whose tokens are `tokens` (at least num_full_blocks * B of them). Blocks
  // that already carry an entry are checked against their tokens and kept; a block whose
  // content already has an entry elsewhere is left uncached (the existing entry serves hits).
  // FailedPrecondition when a block is not in use or a cached block's tokens differ;
  // InvalidArgument when sizes disagree. Nothing changes on error.
  Status CacheFullBlocks(std::span<const LogicalBlockId> ids, std::span<const int32_t> tokens,
                         int32_t num_full_blocks);

  // ref-- of each id, visiting `ids` back to front; a block reaching 0 goes to the free-queue
  // tail keeping its cache entry, and its generation is bumped. FailedPrecondition (nothing
  // changed) when a ref would drop below the block's holds or below 0.
  Status Free(std::span<const LogicalBlockId> ids);

  // Hold: ref++ and hold++ of each id, which must be in use (a remote reader is about to read
  // it). Release: hold-- and ref-- (as Free). FailedPrecondition when an id is free / not held.
  Status Hold(std::span<const LogicalBlockId> ids);
  Status Release(std::span<const LogicalBlockId> ids);

  // Drops the cache entries of `ids` (their contents are bad). Blocks without an entry are
  // ignored. Later chains that went through a dropped entry can no longer be found.
  Status InvalidateCached(std::span<const LogicalBlockId> ids);

  // Generation counter of `id` (see above). `id` must be valid (checked; aborts).
  uint64_t Generation(LogicalBlockId id) const;
  int32_t RefCount(LogicalBlockId id) const;
  int32_t HoldCount(LogicalBlockId id) const;
  bool IsCached(LogicalBlockId id) const;

  // The events recorded since the last call, oldest first (empty unless record_events).
  std::vector<BlockEvent> TakeEvents();

  BlockPoolStats Stats() const;
  // Internal (a bug) naming the first broken invariant: ref/hold counts, free-queue membership
  // and links, counters, hash map <-> block entries.
  Status CheckInvariants() const;

 private:
  static constexpr int32_t kNone = -1;

  struct Block {
    int32_t ref_count = 0;
    int32_t hold_count = 0;
    uint64_t generation = 0;
    // Free queue links (valid while ref_count == 0).
    int32_t prev = kNone;
    int32_t next = kNone;
    bool in_free_queue = false;
    // Prefix-cache entry (entry_id != 0 iff cached).
    uint64_t entry_id = 0;         // unique per registration, never reused
    uint64_t parent_entry_id = 0;  // 0 for the first block of a chain
    BlockHash hash = 0;
    std::vector<int32_t> tokens;
  };

  explicit BlockPool(const BlockPoolOptions& options);

  Status CheckId(LogicalBlockId id) const;
  void PushTail(int32_t b);
  void Unlink(int32_t b);
  void DropEntry(int32_t b);
  // Appends to the last stored event when `continues_last` (its last block is this one's
  // parent), else starts one with `parent`.
  void RecordStored(BlockHash hash, std::optional<BlockHash> parent,
                    std::span<const int32_t> tokens, bool continues_last);
  void DecRef(int32_t b);
  // A cached block matching (hash, parent entry, tokens), or kNone.
  int32_t FindEntry(BlockHash hash, uint64_t parent_entry_id,
                    std::span<const int32_t> tokens) const;

  BlockPoolOptions options_;
  std::vector<Block> blocks_;
  int32_t head_ = kNone;
  int32_t tail_ = kNone;
  int32_t num_free_ = 0;
  int32_t num_cached_free_ = 0;
  int32_t num_held_ = 0;
  uint64_t next_entry_id_ = 1;
  std::unordered_multimap<BlockHash, int32_t> entries_;  // hash -> cached block
  std::vector<BlockEvent> events_;                       // since the last TakeEvents()
};

}  // namespace kvferry::kv
