#include "transfer/plan.h"

#include <gtest/gtest.h>

namespace kvferry::transfer {
namespace {

TEST(MergeAdjacentTest, MergesRunsAdjacentOnBothSides) {
  RegionHandle a{1}, b{2};
  DescriptorList local = {{a, 0, 10}, {a, 10, 10}, {a, 20, 5}, {a, 100, 5}};
  DescriptorList remote = {{b, 50, 10}, {b, 60, 10}, {b, 70, 5}, {b, 75, 5}};
  auto m = MergeAdjacent(local, remote);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].local.offset, 0u);
  EXPECT_EQ(m[0].local.length, 25u);
  EXPECT_EQ(m[0].remote.offset, 50u);
  EXPECT_EQ(m[0].remote.length, 25u);
  EXPECT_EQ(m[1].local.offset, 100u);
  EXPECT_EQ(m[1].remote.offset, 75u);
}

TEST(MergeAdjacentTest, DoesNotMergeAcrossRegionsOrOneSidedAdjacency) {
  RegionHandle a{1}, b{2}, c{3};
  DescriptorList local = {{a, 0, 10}, {c, 10, 10}, {c, 20, 10}};
  DescriptorList remote = {{b, 0, 10}, {b, 10, 10}, {b, 40, 10}};
  auto m = MergeAdjacent(local, remote);
  EXPECT_EQ(m.size(), 3u);
}

TEST(MergeAdjacentTest, DoesNotReorder) {
  RegionHandle a{1}, b{2};
  DescriptorList local = {{a, 10, 10}, {a, 0, 10}};
  DescriptorList remote = {{b, 10, 10}, {b, 0, 10}};
  EXPECT_EQ(MergeAdjacent(local, remote).size(), 2u);
}

}  // namespace
}  // namespace kvferry::transfer
