#include "kv_events/block_mirror.h"

#include <gtest/gtest.h>

namespace kvferry::kv_events {
namespace {

TEST(BlockMirrorTest, SnapshotIsWhatTheEventsLeft) {
  BlockMirror m;
  m.Apply(BlockStored{{1, 2, 3}, std::nullopt, {10, 11, 12, 13, 14, 15}, 2, "CPU"});
  m.Apply(BlockStored{{4}, 2, {20, 21}, 2, "CPU"});
  m.Apply(BlockRemoved{{2}, "CPU"});
  EXPECT_EQ(m.size(), 3);
  const std::vector<Event> snap = m.Snapshot();
  ASSERT_EQ(snap.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(snap[0]));
  EXPECT_EQ(std::get<BlockStored>(snap[1]), (BlockStored{{1}, std::nullopt, {10, 11}, 2, "CPU"}));
  EXPECT_EQ(std::get<BlockStored>(snap[2]), (BlockStored{{3}, 2, {14, 15}, 2, "CPU"}));
  EXPECT_EQ(std::get<BlockStored>(snap[3]), (BlockStored{{4}, 2, {20, 21}, 2, "CPU"}));
  // Replaying the snapshot into another mirror gives the same snapshot.
  BlockMirror again;
  for (const Event& e : snap) again.Apply(e);
  EXPECT_EQ(again.Snapshot(), snap);
  m.Apply(AllBlocksCleared{});
  EXPECT_EQ(m.size(), 0);
  EXPECT_EQ(m.Snapshot().size(), 1u);
}

TEST(BlockMirrorTest, AHashStoredTwiceNeedsTwoRemovals) {
  BlockMirror m;
  m.Apply(BlockStored{{1}, std::nullopt, {5}, 1, std::nullopt});
  m.Apply(BlockStored{{1}, std::nullopt, {5}, 1, std::nullopt});
  m.Apply(BlockRemoved{{1}, std::nullopt});
  EXPECT_EQ(m.size(), 1);
  m.Apply(BlockRemoved{{1, 99}, std::nullopt});  // 99 was never stored: ignored
  EXPECT_EQ(m.size(), 0);
}

TEST(BlockMirrorTest, EachMediumHoldsItsOwnCopy) {
  BlockMirror m;
  m.Apply(BlockStored{{1}, std::nullopt, {5}, 1, "CPU"});
  m.Apply(BlockStored{{1}, std::nullopt, {5}, 1, "STORAGE"});
  EXPECT_EQ(m.size(), 2);
  m.Apply(BlockRemoved{{1}, "CPU"});  // evicted from RAM, still on disk
  const std::vector<Event> snap = m.Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(std::get<BlockStored>(snap[1]), (BlockStored{{1}, std::nullopt, {5}, 1, "STORAGE"}));
}

}  // namespace
}  // namespace kvferry::kv_events
