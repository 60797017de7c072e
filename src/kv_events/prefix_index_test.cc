#include "kvferry/kv_events/prefix_index.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kvferry/kv/block_pool.h"

namespace kvferry::kv_events {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> Tokens(int32_t n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// What a member with `salt` publishes when it caches the whole blocks of `tokens`.
BlockStored StoredOf(std::span<const int32_t> tokens, uint64_t salt) {
  BlockStored e{{}, std::nullopt, {}, kBs, "CPU"};
  uint64_t parent = 0;
  for (size_t i = 0; (i + 1) * kBs <= tokens.size(); ++i) {
    parent = kv::HashBlockTokens(salt, parent, tokens.subspan(i * kBs, kBs));
    e.block_hashes.push_back(parent);
    e.token_ids.insert(e.token_ids.end(), tokens.begin() + i * kBs, tokens.begin() + (i + 1) * kBs);
  }
  return e;
}

EventBatch Batch(Event e) { return EventBatch{0, {std::move(e)}, 0}; }

TEST(PrefixIndexTest, MatchesTheLongestHeldPrefixPerMember) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 7});
  index.SetMember("b", {kBs, 9});  // another salt: its own hashes
  const std::vector<int32_t> prompt = Tokens(14);
  EXPECT_EQ(index.Apply("a", Batch(StoredOf(std::span(prompt).first(12), 7))).stored_blocks, 3);
  EXPECT_EQ(index.Apply("b", Batch(StoredOf(std::span(prompt).first(4), 9))).stored_blocks, 1);
  EXPECT_EQ(index.MatchedTokens(prompt), (std::map<std::string, int64_t>{{"a", 12}, {"b", 4}}));
  // A prompt that differs in its second block matches one block on a.
  std::vector<int32_t> other = prompt;
  other[5] = 99;
  EXPECT_EQ(index.MatchedTokens(other).at("a"), 4);
  // Removing the middle block cuts the chain there.
  const BlockStored& held = StoredOf(std::span(prompt).first(12), 7);
  EXPECT_EQ(index.Apply("a", Batch(BlockRemoved{{held.block_hashes[1]}, "CPU"})).removed_blocks, 1);
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 4);
  EXPECT_EQ(index.blocks("a"), 2);
  EXPECT_EQ(index.Apply("a", Batch(AllBlocksCleared{})).cleared, 1);
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 0);
}

TEST(PrefixIndexTest, ABlockStaysHeldWhileAnyTierHoldsIt) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 7});
  const std::vector<int32_t> prompt = Tokens(9);
  BlockStored ram = StoredOf(std::span(prompt).first(8), 7);
  BlockStored disk = ram;
  disk.medium = "STORAGE";
  index.Apply("a", Batch(ram));
  index.Apply("a", Batch(disk));
  index.Apply("a", Batch(BlockRemoved{ram.block_hashes, "CPU"}));  // evicted from RAM
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 8);               // still on disk
  index.Apply("a", Batch(BlockRemoved{{ram.block_hashes[1]}, "STORAGE"}));
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 4);
}

TEST(PrefixIndexTest, RefusesWhatItCannotCheck) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 7});
  const std::vector<int32_t> prompt = Tokens(8);
  // Another seed: hashes that are not the chain of the tokens under a's salt.
  EXPECT_EQ(index.Apply("a", Batch(StoredOf(prompt, 8))).refused_hash, 1);
  // A lie: the right hashes with other tokens.
  BlockStored lie = StoredOf(prompt, 7);
  lie.token_ids[0] = 42;
  EXPECT_EQ(index.Apply("a", Batch(lie)).refused_hash, 1);
  // Another block size.
  BlockStored wide = StoredOf(prompt, 7);
  wide.block_size = 8;
  wide.block_hashes.resize(1);
  EXPECT_EQ(index.Apply("a", Batch(wide)).refused_block_size, 1);
  EXPECT_EQ(index.blocks("a"), 0);
  // Removals of blocks never stored, events of unknown members.
  EXPECT_EQ(index.Apply("a", Batch(BlockRemoved{{1, 2}, "CPU"})).unknown_removals, 2);
  EXPECT_EQ(index.Apply("z", Batch(StoredOf(prompt, 7))).unknown_member, 1);
  EXPECT_EQ(index.MatchedTokens(prompt), (std::map<std::string, int64_t>{{"a", 0}}));
}

TEST(PrefixIndexTest, NewKeysOrRemovalForgetTheBlocks) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 7});
  const std::vector<int32_t> prompt = Tokens(8);
  index.Apply("a", Batch(StoredOf(prompt, 7)));
  index.SetMember("a", {kBs, 7});  // the same keys: kept
  EXPECT_EQ(index.blocks("a"), 2);
  index.SetMember("a", {kBs, 5});  // restarted with another seed
  EXPECT_EQ(index.blocks("a"), 0);
  index.RemoveMember("a");
  EXPECT_FALSE(index.HasMember("a"));
  EXPECT_TRUE(index.MatchedTokens(prompt).empty());
}

TEST(PrefixIndexTest, AChildStoredAfterItsParentChecksFromTheParent) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 3});
  const std::vector<int32_t> prompt = Tokens(8);
  const BlockStored both = StoredOf(prompt, 3);
  BlockStored child{{both.block_hashes[1]},
                    both.block_hashes[0],
                    std::vector<int32_t>(prompt.begin() + 4, prompt.end()),
                    kBs,
                    "CPU"};
  EXPECT_EQ(index.Apply("a", Batch(child)).stored_blocks, 1);
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 0);  // the parent is not held
  BlockStored parent{{both.block_hashes[0]},
                     std::nullopt,
                     std::vector<int32_t>(prompt.begin(), prompt.begin() + 4),
                     kBs,
                     "CPU"};
  index.Apply("a", Batch(parent));
  EXPECT_EQ(index.MatchedTokens(prompt).at("a"), 8);
}

}  // namespace
}  // namespace kvferry::kv_events

namespace kvferry::kv_events {
namespace {

TEST(PrefixIndexExpectTest, ARoutedPromptCountsUntilConfirmedOrExpired) {
  PrefixIndex index;
  index.SetMember("a", {kBs, 7});
  index.SetMember("b", {kBs, 7});
  const std::vector<int32_t> prompt = Tokens(10);
  index.Expect("a", prompt, /*now_ms=*/1000, /*expect_ms=*/500);
  EXPECT_EQ(index.MatchedTokens(prompt, 1200),
            (std::map<std::string, int64_t>{{"a", 8}, {"b", 0}}));
  EXPECT_EQ(index.MatchedTokens(prompt, 1500).at("a"), 0);  // expired
  index.Expect("a", prompt, 2000, 500);
  index.Apply("a", Batch(StoredOf(std::span(prompt).first(4), 7)));  // confirms the first block
  EXPECT_EQ(index.MatchedTokens(prompt, 2600).at("a"), 4);           // the second one expired
  index.Expect("a", prompt, 2700, 500);
  EXPECT_EQ(index.MatchedTokens(prompt, 2800).at("a"), 8);
  EXPECT_EQ(index.MatchedTokens(prompt, PrefixIndex::kConfirmedOnly).at("a"), 4);  // confirmed only
  index.Expect("b", prompt, 3000, 500);
  index.Apply("b", Batch(AllBlocksCleared{}));  // a restart forgets what it was expected to hold
  EXPECT_EQ(index.MatchedTokens(prompt, 3100).at("b"), 0);
  index.Expect("nobody", prompt, 0, 500);  // ignored
}

}  // namespace
}  // namespace kvferry::kv_events
