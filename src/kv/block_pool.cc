#include "kvferry/kv/block_pool.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "kvferry/common/check.h"

namespace kvferry::kv {
namespace {

// MurmurHash3's 64-bit finalizer: a bijection with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

std::string BlockName(int32_t b) { return "logical block " + std::to_string(b); }

// Multiplicity of each id in `ids`, for validating calls where an id may repeat.
std::vector<std::pair<int32_t, int32_t>> Multiplicities(std::span<const LogicalBlockId> ids) {
  std::vector<int32_t> v;
  v.reserve(ids.size());
  for (LogicalBlockId id : ids) v.push_back(id.value());
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t x : v) {
    if (!out.empty() && out.back().first == x) {
      ++out.back().second;
    } else {
      out.emplace_back(x, 1);
    }
  }
  return out;
}

}  // namespace

BlockHash HashBlockTokens(uint64_t salt, BlockHash parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix64(salt ^ 0x9e3779b97f4a7c15ULL) ^ Mix64(parent + 0x632be59bd9b4e019ULL);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t w = static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) |
                       (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32);
    h = Mix64(h ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  if (i < tokens.size()) h = Mix64(h ^ static_cast<uint32_t>(tokens[i])) + 0x9e3779b97f4a7c15ULL;
  return Mix64(h ^ (static_cast<uint64_t>(tokens.size()) << 1));
}

std::vector<BlockHash> ChainHashes(uint64_t salt, BlockHash parent, int32_t block_size_logical,
                                   std::span<const int32_t> tokens) {
  std::vector<BlockHash> out;
  const size_t bs = static_cast<size_t>(block_size_logical);
  for (size_t i = 0; bs > 0 && (i + 1) * bs <= tokens.size(); ++i) {
    parent = HashBlockTokens(salt, parent, tokens.subspan(i * bs, bs));
    out.push_back(parent);
  }
  return out;
}

StatusOr<BlockPool> BlockPool::Create(const BlockPoolOptions& options) {
  if (options.num_blocks_logical <= 0) {
    return InvalidArgumentError("num_blocks_logical must be positive, got " +
                                std::to_string(options.num_blocks_logical));
  }
  if (options.block_size_logical <= 0) {
    return InvalidArgumentError("block_size_logical must be positive, got " +
                                std::to_string(options.block_size_logical));
  }
  return BlockPool(options);
}

BlockPool::BlockPool(const BlockPoolOptions& options)
    : options_(options), blocks_(options.num_blocks_logical) {
  for (int32_t b = 0; b < num_blocks_logical(); ++b) PushTail(b);
}

Status BlockPool::CheckId(LogicalBlockId id) const {
  if (id.value() < 0 || id.value() >= num_blocks_logical()) {
    return OutOfRangeError(BlockName(id.value()) + " outside pool of " +
                           std::to_string(num_blocks_logical()));
  }
  return Status::Ok();
}

void BlockPool::PushTail(int32_t b) {
  Block& blk = blocks_[b];
  KVF_CHECK(!blk.in_free_queue && blk.ref_count == 0, "{}: ref count {}", BlockName(b),
            blk.ref_count);
  blk.prev = tail_;
  blk.next = kNone;
  if (tail_ != kNone) {
    blocks_[tail_].next = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  blk.in_free_queue = true;
  ++num_free_;
  if (blk.entry_id != 0) ++num_cached_free_;
}

void BlockPool::Unlink(int32_t b) {
  Block& blk = blocks_[b];
  KVF_CHECK(blk.in_free_queue, "{}", BlockName(b));
  if (blk.prev != kNone) {
    blocks_[blk.prev].next = blk.next;
  } else {
    head_ = blk.next;
  }
  if (blk.next != kNone) {
    blocks_[blk.next].prev = blk.prev;
  } else {
    tail_ = blk.prev;
  }
  blk.prev = blk.next = kNone;
  blk.in_free_queue = false;
  --num_free_;
  if (blk.entry_id != 0) --num_cached_free_;
}

void BlockPool::DropEntry(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.entry_id == 0) return;
  auto [lo, hi] = entries_.equal_range(blk.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == b) {
      entries_.erase(it);
      break;
    }
  }
  if (blk.in_free_queue) --num_cached_free_;
  if (options_.record_events) {
    if (events_.empty() || events_.back().kind != BlockEvent::Kind::kRemoved) {
      events_.push_back(
          BlockEvent{BlockEvent::Kind::kRemoved, {}, std::nullopt, {}, BlockEvent::Tier::kMemory});
    }
    events_.back().block_hashes.push_back(blk.hash);
  }
  blk.entry_id = 0;
  blk.parent_entry_id = 0;
  blk.hash = 0;
  blk.tokens.clear();
}

void BlockPool::DecRef(int32_t b) {
  Block& blk = blocks_[b];
  KVF_CHECK(blk.ref_count > blk.hold_count || blk.ref_count > 0, "{}: ref count {}, {} holds",
            BlockName(b), blk.ref_count, blk.hold_count);
  if (--blk.ref_count == 0) {
    ++blk.generation;
    PushTail(b);
  }
}

int32_t BlockPool::FindEntry(BlockHash hash, uint64_t parent_entry_id,
                             std::span<const int32_t> tokens) const {
  auto [lo, hi] = entries_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Block& blk = blocks_[it->second];
    if (blk.parent_entry_id == parent_entry_id &&
        std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return kNone;
}

std::vector<LogicalBlockId> BlockPool::FindCachedPrefix(std::span<const int32_t> tokens) const {
  std::vector<LogicalBlockId> hits;
  const size_t bs = static_cast<size_t>(options_.block_size_logical);
  BlockHash parent_hash = 0;
  uint64_t parent_entry = 0;
  for (size_t i = 0; (i + 1) * bs <= tokens.size(); ++i) {
    std::span<const int32_t> chunk = tokens.subspan(i * bs, bs);
    const BlockHash h = HashBlockTokens(options_.hash_salt, parent_hash, chunk);
    const int32_t b = FindEntry(h, parent_entry, chunk);
    if (b == kNone) break;
    hits.emplace_back(b);
    parent_hash = h;
    parent_entry = blocks_[b].entry_id;
  }
  return hits;
}

StatusOr<std::vector<LogicalBlockId>> BlockPool::Allocate(int32_t n) {
  if (n < 0) return InvalidArgumentError("Allocate: negative count " + std::to_string(n));
  if (n > num_free_) {
    return ResourceExhaustedError("Allocate: " + std::to_string(n) + " blocks requested, " +
                                  std::to_string(num_free_) + " free of " +
                                  std::to_string(num_blocks_logical()));
  }
  std::vector<LogicalBlockId> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    KVF_CHECK(b != kNone);
    Unlink(b);
    DropEntry(b);  // evict: its contents are about to be overwritten
    Block& blk = blocks_[b];
    ++blk.generation;
    blk.ref_count = 1;
    out.emplace_back(b);
  }
  return out;
}

Status BlockPool::Touch(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) {
    KVF_RETURN_IF_ERROR(CheckId(id));
    const Block& blk = blocks_[id.value()];
    if (blk.ref_count == 0 && blk.entry_id == 0) {
      return FailedPreconditionError("Touch: " + BlockName(id.value()) + " is free and not cached");
    }
  }
  for (LogicalBlockId id : ids) {
    Block& blk = blocks_[id.value()];
    if (blk.ref_count == 0) Unlink(id.value());
    ++blk.ref_count;
  }
  return Status::Ok();
}

Status BlockPool::CacheFullBlocks(std::span<const LogicalBlockId> ids,
                                  std::span<const int32_t> tokens, int32_t num_full_blocks) {
  const size_t bs = static_cast<size_t>(options_.block_size_logical);
  if (num_full_blocks < 0 || static_cast<size_t>(num_full_blocks) > ids.size()) {
    return InvalidArgumentError("CacheFullBlocks: num_full_blocks " +
                                std::to_string(num_full_blocks) + " with " +
                                std::to_string(ids.size()) + " blocks");
  }
  if (tokens.size() < static_cast<size_t>(num_full_blocks) * bs) {
    return InvalidArgumentError("CacheFullBlocks: " + std::to_string(tokens.size()) +
                                " tokens cannot fill " + std::to_string(num_full_blocks) +
                                " blocks of " + std::to_string(bs));
  }
  for (int32_t i = 0; i < num_full_blocks; ++i) {
    KVF_RETURN_IF_ERROR(CheckId(ids[i]));
    const Block& blk = blocks_[ids[i].value()];
    if (blk.ref_count == 0) {
      return FailedPreconditionError("CacheFullBlocks: " + BlockName(ids[i].value()) +
                                     " is not in use");
    }
    std::span<const int32_t> chunk = tokens.subspan(i * bs, bs);
    if (blk.entry_id != 0 &&
        !std::equal(blk.tokens.begin(), blk.tokens.end(), chunk.begin(), chunk.end())) {
      return FailedPreconditionError("CacheFullBlocks: " + BlockName(ids[i].value()) +
                                     " is cached with other tokens than block " +
                                     std::to_string(i) + " of the request");
    }
  }
  BlockHash parent_hash = 0;
  uint64_t parent_entry = 0;
  int32_t last_recorded = -2;  // the block index whose store the last event ends with
  for (int32_t i = 0; i < num_full_blocks; ++i) {
    const int32_t b = ids[i].value();
    Block& blk = blocks_[b];
    std::span<const int32_t> chunk = tokens.subspan(i * bs, bs);
    const BlockHash h = HashBlockTokens(options_.hash_salt, parent_hash, chunk);
    if (blk.entry_id != 0 && (blk.hash != h || blk.parent_entry_id != parent_entry)) {
      DropEntry(b);  // registered under a chain that no longer exists; re-register below
    }
    if (blk.entry_id == 0) {
      const int32_t existing = FindEntry(h, parent_entry, chunk);
      if (existing != kNone) {
        parent_entry = blocks_[existing].entry_id;  // same content already cached elsewhere
        parent_hash = h;
        continue;
      }
      blk.entry_id = next_entry_id_++;
      blk.parent_entry_id = parent_entry;
      blk.hash = h;
      blk.tokens.assign(chunk.begin(), chunk.end());
      entries_.emplace(h, b);
      if (options_.record_events) {
        RecordStored(h, i == 0 ? std::nullopt : std::optional<BlockHash>(parent_hash), chunk,
                     last_recorded == i - 1);
        last_recorded = i;
      }
    }
    parent_entry = blk.entry_id;
    parent_hash = h;
  }
  return Status::Ok();
}

void BlockPool::RecordStored(BlockHash hash, std::optional<BlockHash> parent,
                             std::span<const int32_t> tokens, bool continues_last) {
  if (!continues_last || events_.empty() || events_.back().kind != BlockEvent::Kind::kStored) {
    events_.push_back(
        BlockEvent{BlockEvent::Kind::kStored, {}, parent, {}, BlockEvent::Tier::kMemory});
  }
  BlockEvent& e = events_.back();
  e.block_hashes.push_back(hash);
  e.token_ids.insert(e.token_ids.end(), tokens.begin(), tokens.end());
}

std::vector<BlockEvent> BlockPool::TakeEvents() {
  std::vector<BlockEvent> out;
  out.swap(events_);
  return out;
}

Status BlockPool::Free(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) KVF_RETURN_IF_ERROR(CheckId(id));
  for (auto [b, count] : Multiplicities(ids)) {
    const Block& blk = blocks_[b];
    if (blk.ref_count - count < blk.hold_count) {
      return FailedPreconditionError("Free: " + BlockName(b) + " freed " + std::to_string(count) +
                                     " times with ref count " + std::to_string(blk.ref_count) +
                                     " and " + std::to_string(blk.hold_count) + " holds");
    }
  }
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) DecRef(it->value());
  return Status::Ok();
}

Status BlockPool::Hold(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) {
    KVF_RETURN_IF_ERROR(CheckId(id));
    if (blocks_[id.value()].ref_count == 0) {
      return FailedPreconditionError("Hold: " + BlockName(id.value()) + " is free");
    }
  }
  for (LogicalBlockId id : ids) {
    Block& blk = blocks_[id.value()];
    ++blk.ref_count;
    if (blk.hold_count++ == 0) ++num_held_;
  }
  return Status::Ok();
}

Status BlockPool::Release(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) KVF_RETURN_IF_ERROR(CheckId(id));
  for (auto [b, count] : Multiplicities(ids)) {
    if (blocks_[b].hold_count < count) {
      return FailedPreconditionError("Release: " + BlockName(b) + " released " +
                                     std::to_string(count) + " times with " +
                                     std::to_string(blocks_[b].hold_count) + " holds");
    }
  }
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    Block& blk = blocks_[it->value()];
    if (--blk.hold_count == 0) --num_held_;
    DecRef(it->value());
  }
  return Status::Ok();
}

Status BlockPool::InvalidateCached(std::span<const LogicalBlockId> ids) {
  for (LogicalBlockId id : ids) KVF_RETURN_IF_ERROR(CheckId(id));
  for (LogicalBlockId id : ids) DropEntry(id.value());
  return Status::Ok();
}

uint64_t BlockPool::Generation(LogicalBlockId id) const {
  KVF_CHECK_OK(CheckId(id));
  return blocks_[id.value()].generation;
}

int32_t BlockPool::RefCount(LogicalBlockId id) const {
  KVF_CHECK_OK(CheckId(id));
  return blocks_[id.value()].ref_count;
}

int32_t BlockPool::HoldCount(LogicalBlockId id) const {
  KVF_CHECK_OK(CheckId(id));
  return blocks_[id.value()].hold_count;
}

bool BlockPool::IsCached(LogicalBlockId id) const {
  KVF_CHECK_OK(CheckId(id));
  return blocks_[id.value()].entry_id != 0;
}

BlockPoolStats BlockPool::Stats() const {
  return BlockPoolStats{num_blocks_logical(), num_free_, num_blocks_logical() - num_free_,
                        num_cached_free_, num_held_};
}

Status BlockPool::CheckInvariants() const {
  const int32_t n = num_blocks_logical();
  // Free queue: well linked, acyclic, exactly the blocks with ref_count 0.
  int32_t queued = 0;
  int32_t prev = kNone;
  for (int32_t b = head_; b != kNone; b = blocks_[b].next) {
    if (b < 0 || b >= n) return InternalError("free queue links to " + BlockName(b));
    if (++queued > n) return InternalError("free queue has a cycle");
    const Block& blk = blocks_[b];
    if (blk.prev != prev) return InternalError("free queue back link broken at " + BlockName(b));
    if (!blk.in_free_queue) return InternalError(BlockName(b) + " in queue but not marked");
    if (blk.ref_count != 0) return InternalError(BlockName(b) + " in queue with refs");
    prev = b;
  }
  if (prev != tail_) return InternalError("free queue tail is wrong");
  if (queued != num_free_) {
    return InternalError("free count " + std::to_string(num_free_) + " but " +
                         std::to_string(queued) + " queued");
  }
  int32_t cached_free = 0;
  int32_t held = 0;
  size_t entries = 0;
  std::unordered_set<uint64_t> entry_ids;
  for (int32_t b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref_count < 0 || blk.hold_count < 0 || blk.hold_count > blk.ref_count) {
      return InternalError(BlockName(b) + " has ref " + std::to_string(blk.ref_count) + " hold " +
                           std::to_string(blk.hold_count));
    }
    if (blk.in_free_queue != (blk.ref_count == 0)) {
      return InternalError(BlockName(b) + " free-queue membership disagrees with ref count");
    }
    if (blk.hold_count > 0) ++held;
    if (blk.entry_id == 0) {
      if (!blk.tokens.empty()) return InternalError(BlockName(b) + " uncached but has tokens");
      continue;
    }
    ++entries;
    if (blk.in_free_queue) ++cached_free;
    if (!entry_ids.insert(blk.entry_id).second) {
      return InternalError(BlockName(b) + " shares its cache entry id");
    }
    if (blk.tokens.size() != static_cast<size_t>(options_.block_size_logical)) {
      return InternalError(BlockName(b) + " cached with a partial block of tokens");
    }
    int32_t found = 0;
    auto [lo, hi] = entries_.equal_range(blk.hash);
    for (auto it = lo; it != hi; ++it) found += it->second == b;
    if (found != 1) {
      return InternalError(BlockName(b) + " is in the hash map " + std::to_string(found) +
                           " times");
    }
    if (FindEntry(blk.hash, blk.parent_entry_id, blk.tokens) != b) {
      return InternalError(BlockName(b) + " duplicates another block's cache entry");
    }
  }
  if (entries != entries_.size()) return InternalError("hash map has stale entries");
  if (cached_free != num_cached_free_) return InternalError("cached count is wrong");
  if (held != num_held_) return InternalError("held count is wrong");
  return Status::Ok();
}

}  // namespace kvferry::kv
