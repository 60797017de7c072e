#include "kvferry/kv/block_table.h"

#include <gtest/gtest.h>

namespace kvferry::kv {
namespace {

TEST(BlockTableTest, ExpandsIncrementallyAndTruncates) {
  BlockTable table(*BlockGeometry::Create(128, 64));
  table.Append(LogicalBlockId(3));
  const std::vector<LogicalBlockId> more{LogicalBlockId(0), LogicalBlockId(7)};
  table.Append(more);
  EXPECT_EQ(table.num_blocks_logical(), 3);
  EXPECT_EQ(table.num_blocks_kernel(), 6);
  EXPECT_EQ(table.capacity_tokens(), 384);
  std::vector<int32_t> kernel;
  for (KernelBlockId k : table.kernel_ids()) kernel.push_back(k.value());
  EXPECT_EQ(kernel, (std::vector<int32_t>{6, 7, 0, 1, 14, 15}));
  EXPECT_EQ(*table.KernelSlotOfToken(200), (KernelSlot{KernelBlockId(1), 8}));
  EXPECT_EQ(table.KernelSlotOfToken(384).status().code(), StatusCode::kOutOfRange);
  table.Truncate(1);
  EXPECT_EQ(table.num_blocks_kernel(), 2);
  EXPECT_EQ(table.KernelSlotOfToken(200).status().code(), StatusCode::kOutOfRange);
  table.Clear();
  EXPECT_EQ(table.num_blocks_logical(), 0);
  EXPECT_TRUE(table.kernel_ids().empty());
}

}  // namespace
}  // namespace kvferry::kv
