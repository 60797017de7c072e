#include "kvferry/kv/block_geometry.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::kv {
namespace {

BlockGeometry Geo(int32_t logical, int32_t kernel) {
  auto g = BlockGeometry::Create(logical, kernel);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(BlockGeometryTest, RejectsSizesThatDoNotDivide) {
  auto g = BlockGeometry::Create(128, 48);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("48"), std::string_view::npos);
  EXPECT_NE(g.status().message().find("128"), std::string_view::npos);
}

TEST(BlockGeometryTest, RejectsNonPositiveSizes) {
  EXPECT_EQ(BlockGeometry::Create(0, 16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockGeometry::Create(128, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockGeometry::Create(-128, -64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockGeometry::Create(16, 32).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockGeometryTest, MappingIsLTimesRPlusJ) {
  const BlockGeometry g = Geo(128, 64);
  EXPECT_EQ(g.kernel_blocks_per_logical(), 2);
  const KernelBlockRange r = g.KernelBlocksOf(LogicalBlockId(3));
  EXPECT_EQ(r.first(), KernelBlockId(6));
  EXPECT_EQ(r.size(), 2);
  std::vector<KernelBlockId> ids(r.begin(), r.end());
  EXPECT_EQ(ids, (std::vector<KernelBlockId>{KernelBlockId(6), KernelBlockId(7)}));
  EXPECT_EQ(g.KernelBlockOf(LogicalBlockId(3), 1), KernelBlockId(7));
  EXPECT_EQ(g.LogicalBlockOwning(KernelBlockId(7)), LogicalBlockId(3));
  EXPECT_EQ(g.LogicalBlockOwning(KernelBlockId(6)), LogicalBlockId(3));
}

TEST(BlockGeometryTest, MappingIsABijectionPreservingOrder) {
  for (int32_t r : {1, 2, 4, 8}) {
    const BlockGeometry g = Geo(16 * r, 16);
    int32_t expected = 0;
    for (int32_t l = 0; l < 100; ++l) {
      for (KernelBlockId k : g.KernelBlocksOf(LogicalBlockId(l))) {
        EXPECT_EQ(k.value(), expected++);
        EXPECT_EQ(g.LogicalBlockOwning(k), LogicalBlockId(l));
      }
    }
  }
}

TEST(BlockGeometryTest, ExpandsBlockTable) {
  const BlockGeometry g = Geo(64, 16);
  const std::vector<LogicalBlockId> logical{LogicalBlockId(5), LogicalBlockId(0),
                                            LogicalBlockId(2)};
  const std::vector<KernelBlockId> kernel = g.ExpandBlockTable(logical);
  std::vector<int32_t> values;
  for (KernelBlockId k : kernel) values.push_back(k.value());
  EXPECT_EQ(values, (std::vector<int32_t>{20, 21, 22, 23, 0, 1, 2, 3, 8, 9, 10, 11}));
}

TEST(BlockGeometryTest, KernelSlotOfToken) {
  const BlockGeometry g = Geo(128, 64);
  const std::vector<LogicalBlockId> logical{LogicalBlockId(9), LogicalBlockId(3)};
  EXPECT_EQ(*g.KernelSlotOfToken(logical, 0), (KernelSlot{KernelBlockId(18), 0}));
  EXPECT_EQ(*g.KernelSlotOfToken(logical, 63), (KernelSlot{KernelBlockId(18), 63}));
  EXPECT_EQ(*g.KernelSlotOfToken(logical, 64), (KernelSlot{KernelBlockId(19), 0}));
  EXPECT_EQ(*g.KernelSlotOfToken(logical, 130), (KernelSlot{KernelBlockId(6), 2}));
  EXPECT_EQ(*g.KernelBlockOfToken(logical, 255), KernelBlockId(7));
  EXPECT_EQ(g.KernelSlotOfToken(logical, 256).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(g.KernelBlockOfToken(logical, -1).status().code(), StatusCode::kOutOfRange);
}

TEST(BlockGeometryTest, BlockCounts) {
  const BlockGeometry g = Geo(128, 32);
  EXPECT_EQ(g.LogicalBlocksFor(0), 0);
  EXPECT_EQ(g.LogicalBlocksFor(1), 1);
  EXPECT_EQ(g.LogicalBlocksFor(128), 1);
  EXPECT_EQ(g.LogicalBlocksFor(129), 2);
  EXPECT_EQ(g.KernelBlocksFor(129), 5);
  EXPECT_EQ(g.KernelBlocksOfLogicalCount(3), 12);
}

}  // namespace
}  // namespace kvferry::kv
