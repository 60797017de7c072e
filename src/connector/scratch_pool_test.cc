// ScratchPool on a real agent: areas are registered once and reused (the smallest that fits),
// the pool keeps no more than its limits, and what it drops or holds at the end is deregistered.
#include "connector/scratch_pool.h"

#include <gtest/gtest.h>

namespace kvferry::connector::internal {
namespace {

std::unique_ptr<transfer::Agent> LoopbackAgent() {
  transfer::AgentOptions o;
  o.name = "scratch-pool-test";
  o.backend = transfer::BackendKind::kLoopback;
  return std::move(transfer::Agent::Create(o)).value();
}

TEST(ScratchPoolTest, ReusesTheSmallestAreaThatFits) {
  auto agent = LoopbackAgent();
  ScratchPool pool(agent.get(), 4, 1 << 20);
  ScratchArea big = std::move(pool.Acquire(4096)).value();
  ScratchArea small = std::move(pool.Acquire(512)).value();
  const std::byte* small_data = small.data.get();
  const std::byte* big_data = big.data.get();
  pool.GiveBack(std::move(big));
  pool.GiveBack(std::move(small));
  EXPECT_EQ(pool.kept_areas(), 2u);
  ScratchArea again = std::move(pool.Acquire(300)).value();
  EXPECT_EQ(again.data.get(), small_data);  // registered once, not again
  EXPECT_EQ(again.capacity, 512u);
  ScratchArea larger = std::move(pool.Acquire(1000)).value();
  EXPECT_EQ(larger.data.get(), big_data);
  ScratchArea fresh = std::move(pool.Acquire(8192)).value();  // nothing kept fits: a new one
  EXPECT_EQ(fresh.capacity, 8192u);
  EXPECT_EQ(pool.kept_areas(), 0u);
  // Registered with the agent: deregistering one succeeds.
  EXPECT_EQ(agent->DeregisterMemory(fresh.region).code(), StatusCode::kOk);
  pool.GiveBack(std::move(again));
  pool.GiveBack(std::move(larger));
}

TEST(ScratchPoolTest, KeepsNoMoreThanItsLimitsAndDeregistersTheRest) {
  auto agent = LoopbackAgent();
  std::vector<transfer::RegionHandle> regions;
  {
    ScratchPool pool(agent.get(), /*max_areas=*/2, /*max_bytes=*/3000);
    std::vector<ScratchArea> areas;
    for (uint64_t bytes : {1000, 1000, 1000, 2500}) {
      areas.push_back(std::move(pool.Acquire(bytes)).value());
      regions.push_back(areas.back().region);
    }
    for (ScratchArea& a : areas) pool.GiveBack(std::move(a));
    EXPECT_EQ(pool.kept_areas(), 2u);  // the third is over the count, the 2500 over the bytes
    EXPECT_EQ(agent->DeregisterMemory(regions[2]).code(), StatusCode::kNotFound);
    EXPECT_EQ(agent->DeregisterMemory(regions[3]).code(), StatusCode::kNotFound);
  }
  // The pool's destruction deregistered what it kept.
  EXPECT_EQ(agent->DeregisterMemory(regions[0]).code(), StatusCode::kNotFound);
  EXPECT_EQ(agent->DeregisterMemory(regions[1]).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvferry::connector::internal
