#include "kvferry/kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <vector>

namespace kvferry::kv {
namespace {

constexpr int32_t kBs = 4;

BlockPool MakePool(int32_t n, uint64_t salt = 0) {
  auto pool = BlockPool::Create({n, kBs, salt});
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(pool).value();
}

std::vector<int32_t> Values(const std::vector<LogicalBlockId>& ids) {
  std::vector<int32_t> v;
  for (LogicalBlockId id : ids) v.push_back(id.value());
  return v;
}

std::vector<LogicalBlockId> Ids(std::initializer_list<int32_t> v) {
  std::vector<LogicalBlockId> out;
  for (int32_t x : v) out.emplace_back(x);
  return out;
}

TEST(BlockPoolTest, RejectsBadOptions) {
  EXPECT_EQ(BlockPool::Create({0, 16, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::Create({8, 0, 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, AllocateIsAllOrNothing) {
  BlockPool pool = MakePool(4);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Values(*a), (std::vector<int32_t>{0, 1, 2}));
  auto b = pool.Allocate(2);
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{4, 1, 3, 0, 0}));
  EXPECT_TRUE(pool.CheckInvariants().ok());
  EXPECT_EQ(pool.Allocate(-1).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, FreeGoesToTailInReverseOrder) {
  BlockPool pool = MakePool(4);
  auto a = *pool.Allocate(4);
  ASSERT_TRUE(pool.Free(Ids({0, 1})).ok());  // queue: 1 0
  ASSERT_TRUE(pool.Free(Ids({3, 2})).ok());  // queue: 1 0 2 3
  EXPECT_EQ(Values(*pool.Allocate(4)), (std::vector<int32_t>{1, 0, 2, 3}));
}

TEST(BlockPoolTest, FreeErrorsChangeNothing) {
  BlockPool pool = MakePool(4);
  auto a = *pool.Allocate(2);
  const BlockPoolStats before = pool.Stats();
  EXPECT_EQ(pool.Free(Ids({0, 2})).code(), StatusCode::kFailedPrecondition);  // 2 is free
  EXPECT_EQ(pool.Free(Ids({0, 0})).code(), StatusCode::kFailedPrecondition);  // ref 1, freed 2x
  EXPECT_EQ(pool.Free(Ids({9})).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(pool.Stats(), before);
  EXPECT_EQ(pool.RefCount(LogicalBlockId(0)), 1);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, PrefixHitSharesAndSurvivesFree) {
  BlockPool pool = MakePool(8);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto ids = *pool.Allocate(3);
  ASSERT_TRUE(pool.CacheFullBlocks(ids, tokens, 2).ok());
  EXPECT_TRUE(pool.IsCached(ids[0]));
  EXPECT_TRUE(pool.IsCached(ids[1]));
  EXPECT_FALSE(pool.IsCached(ids[2]));
  EXPECT_EQ(pool.FindCachedPrefix(tokens), (std::vector<LogicalBlockId>{ids[0], ids[1]}));
  ASSERT_TRUE(pool.Free(ids).ok());
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{8, 8, 0, 2, 0}));
  // Different second block: only the first hits.
  const std::vector<int32_t> other{1, 2, 3, 4, 5, 6, 7, 0};
  auto hits = pool.FindCachedPrefix(other);
  EXPECT_EQ(hits, (std::vector<LogicalBlockId>{ids[0]}));
  ASSERT_TRUE(pool.Touch(hits).ok());
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{8, 7, 1, 1, 0}));
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, SaltSeparatesPools) {
  const std::vector<int32_t> tokens{1, 2, 3, 4};
  EXPECT_NE(HashBlockTokens(1, 0, tokens), HashBlockTokens(2, 0, tokens));
  EXPECT_NE(HashBlockTokens(0, 0, tokens), HashBlockTokens(0, 1, tokens));
  EXPECT_EQ(HashBlockTokens(7, 3, tokens), HashBlockTokens(7, 3, tokens));
}

TEST(BlockPoolTest, TouchOfUncachedFreeBlockFails) {
  BlockPool pool = MakePool(4);
  EXPECT_EQ(pool.Touch(Ids({1})).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{4, 4, 0, 0, 0}));
}

TEST(BlockPoolTest, EvictionDropsCacheEntryAndBumpsGeneration) {
  BlockPool pool = MakePool(2);
  const std::vector<int32_t> tokens{1, 2, 3, 4};
  auto ids = *pool.Allocate(1);
  const uint64_t g0 = pool.Generation(ids[0]);
  ASSERT_TRUE(pool.CacheFullBlocks(ids, tokens, 1).ok());
  ASSERT_TRUE(pool.Free(ids).ok());
  const uint64_t g1 = pool.Generation(ids[0]);
  EXPECT_GT(g1, g0);
  auto all = *pool.Allocate(2);  // evicts the cached block (queue: 1, 0)
  EXPECT_EQ(Values(all), (std::vector<int32_t>{1, 0}));
  EXPECT_GT(pool.Generation(ids[0]), g1);
  EXPECT_FALSE(pool.IsCached(ids[0]));
  EXPECT_TRUE(pool.FindCachedPrefix(tokens).empty());
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, HoldKeepsBlocksAcrossFree) {
  BlockPool pool = MakePool(4);
  auto ids = *pool.Allocate(2);
  ASSERT_TRUE(pool.Hold(ids).ok());
  ASSERT_TRUE(pool.Free(ids).ok());
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{4, 2, 2, 0, 2}));
  const uint64_t g = pool.Generation(ids[0]);
  EXPECT_EQ(pool.Free(ids).code(), StatusCode::kFailedPrecondition);  // only holds left
  ASSERT_TRUE(pool.Release(ids).ok());
  EXPECT_EQ(pool.Stats(), (BlockPoolStats{4, 4, 0, 0, 0}));
  EXPECT_GT(pool.Generation(ids[0]), g);
  EXPECT_EQ(pool.Release(ids).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Hold(ids).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, InvalidateCachedHidesBlockAndItsChain) {
  BlockPool pool = MakePool(4);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  auto ids = *pool.Allocate(2);
  ASSERT_TRUE(pool.CacheFullBlocks(ids, tokens, 2).ok());
  ASSERT_TRUE(pool.InvalidateCached(Ids({ids[0].value()})).ok());
  EXPECT_TRUE(pool.FindCachedPrefix(tokens).empty());
  ASSERT_TRUE(pool.Free(ids).ok());
  EXPECT_EQ(pool.Stats().cached, 1);  // the orphaned child still counts until evicted
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, ChildOfEvictedParentIsNeverReturnedUnderANewParent) {
  BlockPool pool = MakePool(3);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  auto ids = *pool.Allocate(2);  // 0, 1
  ASSERT_TRUE(pool.CacheFullBlocks(ids, tokens, 2).ok());
  ASSERT_TRUE(pool.Free(Ids({0})).ok());
  ASSERT_TRUE(pool.InvalidateCached(Ids({0})).ok());  // parent's entry gone
  // Recache the same first block in block 2: the old child (block 1) hangs off the old entry.
  auto fresh = *pool.Allocate(1);
  ASSERT_EQ(fresh[0].value(), 2);
  ASSERT_TRUE(pool.CacheFullBlocks(fresh, tokens, 1).ok());
  EXPECT_EQ(pool.FindCachedPrefix(tokens), (std::vector<LogicalBlockId>{fresh[0]}));
}

TEST(BlockPoolTest, DuplicateContentIsCachedOnce) {
  BlockPool pool = MakePool(4);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  auto a = *pool.Allocate(2);
  auto b = *pool.Allocate(2);
  ASSERT_TRUE(pool.CacheFullBlocks(a, tokens, 2).ok());
  ASSERT_TRUE(pool.CacheFullBlocks(b, tokens, 2).ok());
  EXPECT_FALSE(pool.IsCached(b[0]));
  EXPECT_FALSE(pool.IsCached(b[1]));
  EXPECT_EQ(pool.FindCachedPrefix(tokens), a);
  // Tokens that contradict an existing entry are a caller error.
  const std::vector<int32_t> wrong{9, 9, 9, 9};
  EXPECT_EQ(pool.CacheFullBlocks(a, wrong, 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.CacheFullBlocks(a, tokens, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

// An id the pool does not have is the caller's bug, not an error to handle: the accessors abort
// (in release builds too) rather than read past the pool.
TEST(BlockPoolEventsTest, StoresRemovalsAndNothingWhenOff) {
  BlockPool off = MakePool(4);
  auto ids = off.Allocate(2);
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(off.CacheFullBlocks(*ids, std::vector<int32_t>(8, 7), 2).ok());
  EXPECT_TRUE(off.TakeEvents().empty());

  auto created = BlockPool::Create(
      {.num_blocks_logical = 3, .block_size_logical = kBs, .hash_salt = 5, .record_events = true});
  ASSERT_TRUE(created.ok());
  BlockPool pool = std::move(created).value();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.CacheFullBlocks(*a, tokens, 2).ok());
  const BlockHash h0 = HashBlockTokens(5, 0, std::span(tokens).subspan(0, 4));
  const BlockHash h1 = HashBlockTokens(5, h0, std::span(tokens).subspan(4, 4));
  std::vector<BlockEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (BlockEvent{BlockEvent::Kind::kStored,
                                   {h0, h1},
                                   std::nullopt,
                                   {1, 2, 3, 4, 5, 6, 7, 8},
                                   BlockEvent::Tier::kMemory}));
  EXPECT_TRUE(pool.TakeEvents().empty());
  // Registering again stores nothing new; freeing keeps the entries (cached).
  ASSERT_TRUE(pool.CacheFullBlocks(*a, tokens, 2).ok());
  ASSERT_TRUE(pool.Free(*a).ok());
  EXPECT_TRUE(pool.TakeEvents().empty());
  // Free walks back to front: the queue is [2, 1, 0]; allocating two evicts block 1 (h1) after
  // the uncached block 2; then the third evicts h0.
  ASSERT_TRUE(pool.Allocate(2).ok());
  ASSERT_TRUE(pool.Allocate(1).ok());
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(
      events[0],
      (BlockEvent{
          BlockEvent::Kind::kRemoved, {h1, h0}, std::nullopt, {}, BlockEvent::Tier::kMemory}));
}

TEST(BlockPoolEventsTest, AStoreAfterACachedBlockNamesItsParent) {
  auto created = BlockPool::Create(
      {.num_blocks_logical = 4, .block_size_logical = kBs, .hash_salt = 0, .record_events = true});
  ASSERT_TRUE(created.ok());
  BlockPool pool = std::move(created).value();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  auto a = pool.Allocate(1);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.CacheFullBlocks(*a, tokens, 1).ok());
  pool.TakeEvents();
  // A second request hits block a[0] and fills a new second block.
  ASSERT_TRUE(pool.Touch(*a).ok());
  auto b = pool.Allocate(1);
  ASSERT_TRUE(b.ok());
  const std::vector<LogicalBlockId> table = {(*a)[0], (*b)[0]};
  ASSERT_TRUE(pool.CacheFullBlocks(table, tokens, 2).ok());
  const BlockHash h0 = HashBlockTokens(0, 0, std::span(tokens).subspan(0, 4));
  const std::vector<BlockEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].block_hashes,
            (std::vector<BlockHash>{HashBlockTokens(0, h0, std::span(tokens).subspan(4, 4))}));
  EXPECT_EQ(events[0].parent_block_hash, std::optional<BlockHash>(h0));
  EXPECT_EQ(events[0].token_ids, (std::vector<int32_t>{5, 6, 7, 8}));
  // Invalidation is a removal too.
  ASSERT_TRUE(pool.InvalidateCached(*a).ok());
  const std::vector<BlockEvent> removed = pool.TakeEvents();
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].kind, BlockEvent::Kind::kRemoved);
  EXPECT_EQ(removed[0].block_hashes, (std::vector<BlockHash>{h0}));
}

TEST(BlockPoolDeathTest, AccessorsAbortOnAnIdOutsideThePool) {
  BlockPool pool = MakePool(4);
  EXPECT_DEATH((void)pool.RefCount(LogicalBlockId(4)),
               "KVF_CHECK_OK failed: CheckId\\(id\\): OUT_OF_RANGE: logical block 4 outside pool "
               "of 4");
  EXPECT_DEATH((void)pool.Generation(LogicalBlockId(-1)), "logical block -1 outside pool of 4");
}

// ---------------------------------------------------------------------------------------------
// Randomized: thousands of steps against a simple model.

struct ModelBlock {
  int32_t ref = 0;
  int32_t hold = 0;
  uint64_t generation = 0;
  bool cached = false;
  std::vector<int32_t> prefix;  // the tokens this block's KV stands for, when cached
};

struct Request {
  std::vector<int32_t> tokens;
  std::vector<LogicalBlockId> ids;
};

class Model {
 public:
  explicit Model(int32_t n) : blocks_(n) {
    for (int32_t b = 0; b < n; ++b) queue_.push_back(b);
  }
  BlockPoolStats Stats() const {
    BlockPoolStats s;
    s.total = static_cast<int32_t>(blocks_.size());
    for (const ModelBlock& b : blocks_) {
      if (b.ref == 0) {
        ++s.free;
        s.cached += b.cached;
      } else {
        ++s.in_use;
      }
      s.held += b.hold > 0;
    }
    return s;
  }
  int32_t num_free() const { return static_cast<int32_t>(queue_.size()); }
  std::vector<int32_t> Allocate(int32_t n) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < n; ++i) {
      const int32_t b = queue_.front();
      queue_.pop_front();
      blocks_[b].cached = false;
      blocks_[b].prefix.clear();
      ++blocks_[b].generation;
      blocks_[b].ref = 1;
      out.push_back(b);
    }
    return out;
  }
  void Touch(int32_t b) {
    if (blocks_[b].ref++ == 0) queue_.remove(b);
  }
  void DecRef(int32_t b) {
    if (--blocks_[b].ref == 0) {
      ++blocks_[b].generation;
      queue_.push_back(b);
    }
  }
  ModelBlock& block(int32_t b) { return blocks_[b]; }
  int32_t size() const { return static_cast<int32_t>(blocks_.size()); }

 private:
  std::vector<ModelBlock> blocks_;
  std::list<int32_t> queue_;
};

TEST(BlockPoolRandomTest, MatchesModelOverThousandsOfSteps) {
  constexpr int32_t kBlocks = 48;
  BlockPool pool = MakePool(kBlocks, /*salt=*/42);
  Model model(kBlocks);
  std::mt19937 rng(12345);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // A few prompt templates, so prompts share prefixes often.
  std::vector<std::vector<int32_t>> templates(4);
  for (auto& t : templates) {
    for (int i = 0; i < 40; ++i) t.push_back(uniform(0, 2));
  }
  std::vector<Request> active;
  std::vector<std::vector<LogicalBlockId>> held;
  int hits_seen = 0;

  for (int step = 0; step < 20000; ++step) {
    const int op = uniform(0, 9);
    if (op <= 3) {  // start a request: prefix lookup, touch hits, allocate the rest
      Request req;
      req.tokens = templates[uniform(0, 3)];
      req.tokens.resize(uniform(1, 40));
      if (uniform(0, 3) == 0) req.tokens[uniform(0, static_cast<int>(req.tokens.size()) - 1)] = 7;
      std::vector<LogicalBlockId> hits = pool.FindCachedPrefix(req.tokens);
      hits.resize(uniform(0, static_cast<int>(hits.size())));  // caller may keep fewer
      for (size_t i = 0; i < hits.size(); ++i) {  // a hit must stand for exactly these tokens
        const ModelBlock& mb = model.block(hits[i].value());
        ASSERT_TRUE(mb.cached) << "step " << step;
        ASSERT_TRUE(std::equal(mb.prefix.begin(), mb.prefix.end(), req.tokens.begin(),
                               req.tokens.begin() + (i + 1) * kBs))
            << "step " << step;
      }
      hits_seen += static_cast<int>(hits.size());
      ASSERT_TRUE(pool.Touch(hits).ok());
      for (LogicalBlockId h : hits) model.Touch(h.value());
      const int32_t need = (static_cast<int32_t>(req.tokens.size()) + kBs - 1) / kBs -
                           static_cast<int32_t>(hits.size());
      auto fresh = pool.Allocate(need);
      if (need > model.num_free()) {
        ASSERT_EQ(fresh.status().code(), StatusCode::kResourceExhausted) << "step " << step;
        ASSERT_TRUE(pool.Free(hits).ok());
        for (auto it = hits.rbegin(); it != hits.rend(); ++it) model.DecRef(it->value());
      } else {
        ASSERT_TRUE(fresh.ok()) << fresh.status();
        std::vector<int32_t> expected = model.Allocate(need);
        ASSERT_EQ(Values(*fresh), expected) << "step " << step;  // exact LRU order
        req.ids = hits;
        req.ids.insert(req.ids.end(), fresh->begin(), fresh->end());
        active.push_back(std::move(req));
      }
    } else if (op <= 5 && !active.empty()) {  // cache a request's full blocks
      Request& req = active[uniform(0, static_cast<int>(active.size()) - 1)];
      const int32_t full = static_cast<int32_t>(req.tokens.size()) / kBs;
      ASSERT_TRUE(pool.CacheFullBlocks(req.ids, req.tokens, full).ok());
      for (int32_t i = 0; i < full; ++i) {
        ModelBlock& mb = model.block(req.ids[i].value());
        mb.cached = pool.IsCached(req.ids[i]);
        if (mb.cached) mb.prefix.assign(req.tokens.begin(), req.tokens.begin() + (i + 1) * kBs);
      }
      std::span<const int32_t> full_tokens(req.tokens.data(), full * kBs);
      const auto found = pool.FindCachedPrefix(full_tokens);
      ASSERT_EQ(static_cast<int32_t>(found.size()), full) << "step " << step;
    } else if (op <= 7 && !active.empty()) {  // finish a request, sometimes holding its blocks
      const int i = uniform(0, static_cast<int>(active.size()) - 1);
      Request req = std::move(active[i]);
      active.erase(active.begin() + i);
      if (uniform(0, 2) == 0) {
        ASSERT_TRUE(pool.Hold(req.ids).ok());
        for (LogicalBlockId id : req.ids) {
          ++model.block(id.value()).ref;
          ++model.block(id.value()).hold;
        }
        held.push_back(req.ids);
      }
      ASSERT_TRUE(pool.Free(req.ids).ok());
      for (auto it = req.ids.rbegin(); it != req.ids.rend(); ++it) model.DecRef(it->value());
    } else if (op == 8 && !held.empty()) {  // the remote reader is done
      const int i = uniform(0, static_cast<int>(held.size()) - 1);
      ASSERT_TRUE(pool.Release(held[i]).ok());
      for (auto it = held[i].rbegin(); it != held[i].rend(); ++it) {
        --model.block(it->value()).hold;
        model.DecRef(it->value());
      }
      held.erase(held.begin() + i);
    } else if (op == 9) {  // bad contents somewhere, or a caller error that must change nothing
      const LogicalBlockId id(uniform(0, kBlocks - 1));
      if (uniform(0, 1) == 0) {
        ASSERT_TRUE(pool.InvalidateCached({&id, 1}).ok());
        model.block(id.value()).cached = false;
        model.block(id.value()).prefix.clear();
      } else if (model.block(id.value()).ref == model.block(id.value()).hold) {
        ASSERT_EQ(pool.Free({&id, 1}).code(), StatusCode::kFailedPrecondition);
      }
    }
    ASSERT_EQ(pool.Stats(), model.Stats()) << "step " << step;
    ASSERT_TRUE(pool.CheckInvariants().ok()) << "step " << step << ": " << pool.CheckInvariants();
    if (step % 64 == 0) {
      for (int32_t b = 0; b < kBlocks; ++b) {
        const LogicalBlockId id(b);
        ASSERT_EQ(pool.RefCount(id), model.block(b).ref) << b;
        ASSERT_EQ(pool.HoldCount(id), model.block(b).hold) << b;
        ASSERT_EQ(pool.Generation(id), model.block(b).generation) << b;
        ASSERT_EQ(pool.IsCached(id), model.block(b).cached) << b;
      }
    }
  }
  EXPECT_GT(hits_seen, 100);  // the test exercised the prefix cache
  for (Request& req : active) ASSERT_TRUE(pool.Free(req.ids).ok());
  for (auto& ids : held) ASSERT_TRUE(pool.Release(ids).ok());
  const BlockPoolStats end = pool.Stats();
  EXPECT_EQ(end.free, kBlocks);
  EXPECT_EQ(end.held, 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

}  // namespace
}  // namespace kvferry::kv
