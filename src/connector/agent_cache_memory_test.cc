// AgentCacheMemory on real agents: a cache's regions come from the agent (registered once, so
// their handles are the ones a peer sees), go back to it when the cache is freed, and a cache
// that outlives its agent gives nothing back twice.
#include "connector/agent_cache_memory.h"

#include <gtest/gtest.h>

#include "kvferry/transfer/agent.h"

namespace kvferry::connector::internal {
namespace {

kv::CacheSpec Spec() {
  kv::CacheSpec s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.dtype = kv::DType::kF32;
  s.layout = kv::Layout::kHND;
  s.block_size_kernel = 16;
  s.num_blocks_kernel = 8;
  return s;
}

class AgentCacheMemoryTest : public ::testing::TestWithParam<transfer::BackendKind> {
 protected:
  void SetUp() override {
    transfer::AgentOptions o;
    o.name = "cache-memory-test";
    o.backend = GetParam();
    auto a = transfer::Agent::Create(o);
    ASSERT_TRUE(a.ok()) << a.status();
    agent_ = std::move(a).value();
    memory_ = std::make_shared<AgentCacheMemory>(agent_.get(), "test");
  }
  std::unique_ptr<transfer::Agent> agent_;
  std::shared_ptr<AgentCacheMemory> memory_;
};

TEST_P(AgentCacheMemoryTest, RegionsComeFromTheAgentAndGoBackToIt) {
  auto cache = kv::KvCache::Allocate(Spec(), memory_->Hooks());
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int32_t i = 0; i < (*cache)->num_regions(); ++i) {
    const kv::RegionView v = (*cache)->region(i);
    ASSERT_TRUE(memory_->RegionOf(v.base).has_value()) << "region " << i;
    for (size_t b = 0; b < v.size_bytes; ++b) ASSERT_EQ(v.base[b], std::byte{0});
  }
  EXPECT_FALSE(memory_->RegionOf(nullptr).has_value());
  const std::byte* first = (*cache)->region(0).base;
  const transfer::RegionHandle h = *memory_->RegionOf(first);
  // The handles are the agent's own: it knows the last one (and frees it here; the cache's
  // release of it then finds nothing to do).
  const int32_t last = (*cache)->num_regions() - 1;
  EXPECT_TRUE(agent_->DeregisterMemory(*memory_->RegionOf((*cache)->region(last).base)).ok());
  cache->reset();  // ~KvCache gives every region back: the agent no longer knows them
  EXPECT_FALSE(memory_->RegionOf(first).has_value());
  EXPECT_EQ(agent_->DeregisterMemory(h).code(), StatusCode::kNotFound);
}

TEST_P(AgentCacheMemoryTest, ACacheThatOutlivesItsAgentGivesNothingBack) {
  auto cache = kv::KvCache::Allocate(Spec(), memory_->Hooks());
  ASSERT_TRUE(cache.ok()) << cache.status();
  memory_->Detach();
  agent_.reset();  // frees what it allocated
  cache->reset();  // releases are no-ops now (ASan would see a double free otherwise)
  EXPECT_EQ(kv::KvCache::Allocate(Spec(), memory_->Hooks()).status().code(),
            StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Backends, AgentCacheMemoryTest,
                         ::testing::Values(transfer::BackendKind::kUcx,
                                           transfer::BackendKind::kLoopback,
                                           transfer::BackendKind::kSocket),
                         [](const auto& info) {
                           return std::string(transfer::BackendKindName(info.param));
                         });

}  // namespace
}  // namespace kvferry::connector::internal
