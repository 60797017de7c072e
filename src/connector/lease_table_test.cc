#include "kvferry/connector/lease_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::connector {
namespace {

using kv::LogicalBlockId;

TEST(LeaseTableTest, EndBumpsGenerationsOfBlocksNoOtherLeaseHolds) {
  LeaseTable t(8);
  const LogicalBlockId a[] = {LogicalBlockId(1), LogicalBlockId(2)};
  const LogicalBlockId b[] = {LogicalBlockId(2), LogicalBlockId(5)};
  auto ga = t.Grant("a", a, Deadline::AfterMs(60000));
  ASSERT_TRUE(ga.ok());
  EXPECT_EQ(*ga, (std::vector<uint64_t>{1, 1}));
  ASSERT_TRUE(t.Grant("b", b, Deadline::AfterMs(60000)).ok());
  EXPECT_EQ(t.blocks_held(), 3);
  EXPECT_EQ(t.Grant("a", a, Deadline::AfterMs(1)).status().code(), StatusCode::kAlreadyExists);

  ASSERT_TRUE(t.End("a").ok());
  EXPECT_EQ(t.Generation(LogicalBlockId(1)), 2u);
  EXPECT_EQ(t.Generation(LogicalBlockId(2)), 1u);  // still held by b
  EXPECT_EQ(t.blocks_held(), 2);
  ASSERT_TRUE(t.End("b").ok());
  EXPECT_EQ(t.Generation(LogicalBlockId(2)), 2u);
  EXPECT_EQ(t.Generation(LogicalBlockId(5)), 2u);
  EXPECT_EQ(t.blocks_held(), 0);
  EXPECT_EQ(t.End("b").code(), StatusCode::kNotFound);
  // The raw table (what D reads) agrees.
  const uint64_t* raw = static_cast<const uint64_t*>(t.generations_data());
  EXPECT_EQ(raw[5], 2u);
  EXPECT_EQ(raw[0], 1u);
}

TEST(LeaseTableTest, GivenStorageHoldsEveryCopy) {
  // The connector's agents' memory (a same-host D maps it): the table writes there, not into
  // copies of its own.
  std::vector<uint64_t> rank0(4, 0), rank1(4, 0);
  LeaseTable t(4, std::vector<uint64_t*>{rank0.data(), rank1.data()});
  EXPECT_EQ(t.generations_data(0), rank0.data());
  EXPECT_EQ(t.generations_data(1), rank1.data());
  EXPECT_EQ(rank0, (std::vector<uint64_t>{1, 1, 1, 1}));  // never 0: a zeroed table cannot match
  const LogicalBlockId ids[] = {LogicalBlockId(3)};
  ASSERT_TRUE(t.Grant("r", ids, Deadline::AfterMs(60000)).ok());
  ASSERT_TRUE(t.End("r").ok());
  EXPECT_EQ(rank0, (std::vector<uint64_t>{1, 1, 1, 2}));
  EXPECT_EQ(rank1, rank0);
}

TEST(LeaseTableTest, ExpiredLeasesEnd) {
  LeaseTable t(4);
  const LogicalBlockId a[] = {LogicalBlockId(0)};
  const LogicalBlockId b[] = {LogicalBlockId(3)};
  ASSERT_TRUE(t.Grant("a", a, Deadline::AfterMs(0)).ok());
  ASSERT_TRUE(t.Grant("b", b, Deadline::AfterMs(60000)).ok());
  EXPECT_EQ(t.EndExpired(), std::vector<std::string>{"a"});
  EXPECT_FALSE(t.Has("a"));
  EXPECT_TRUE(t.Has("b"));
  EXPECT_EQ(t.Generation(LogicalBlockId(0)), 2u);
}

TEST(LeaseTableTest, OutOfRangeIdRecordsNothing) {
  LeaseTable t(4);
  const LogicalBlockId ids[] = {LogicalBlockId(1), LogicalBlockId(4)};
  EXPECT_EQ(t.Grant("a", ids, Deadline::AfterMs(100)).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.blocks_held(), 0);
  EXPECT_FALSE(t.Has("a"));
}

}  // namespace
}  // namespace kvferry::connector
