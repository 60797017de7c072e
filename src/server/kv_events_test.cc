// A serving engine's KV events, read back by a subscriber over loopback ZeroMQ: what the prefix
// cache stores is published with the hashes the cache itself computes, and evictions follow.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include "kvferry/kv/block_pool.h"
#include "kvferry/kv_events/subscriber.h"
#include "kvferry/server/engine_loop.h"

namespace kvferry::server {
namespace {

constexpr int32_t kBlock = 16;

std::unique_ptr<EngineLoop> StartLoop(int32_t num_blocks, const std::string& offload_dir = "") {
  EngineLoopOptions o;
  o.engine.model = "tiny";
  o.engine.block_size = kBlock;
  o.engine.num_kv_blocks = num_blocks;
  o.engine.kv_offload_dir = offload_dir;
  o.engine.kv_offload_bytes = offload_dir.empty() ? 0 : 1 << 20;
  o.engine.prefix_hash_seed = 42;
  o.kv_events.emplace();
  o.kv_events->endpoint = o.kv_events->replay_endpoint = "tcp://127.0.0.1:0";
  auto loop = EngineLoop::Start(std::move(o), nullptr);
  EXPECT_TRUE(loop.ok()) << loop.status();
  return std::move(loop).value();
}

void Generate(EngineLoop& loop, const std::string& id, std::vector<int32_t> prompt) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.max_tokens = 1;
  auto channel = loop.Submit(std::move(r));
  while (true) {
    auto out = channel->Pop(Deadline::AfterMs(30000));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->error.ok()) << out->error;
    if (out->finished) return;
  }
}

// Every event up to and including the first of `kind` after `seq`.
std::vector<kv_events::Event> EventsUntil(kv_events::Subscriber& s, std::string_view kind) {
  std::vector<kv_events::Event> got;
  while (true) {
    auto b = s.Next(10000);
    EXPECT_TRUE(b.ok() && b->has_value()) << "no event batch within 10 s";
    if (!b.ok() || !b->has_value()) return got;
    for (auto& e : (*b)->batch.events) got.push_back(e);
    for (const auto& e : (*b)->batch.events) {
      if (kv_events::EventName(e) == kind) return got;
    }
  }
}

TEST(KvEventsTest, StoredBlocksCarryThePoolsHashesAndEvictionsFollow) {
  auto loop = StartLoop(/*num_blocks=*/6);
  ASSERT_NE(loop->kv_events_endpoint(), "");
  kv_events::SubscriberOptions so;
  so.endpoint = loop->kv_events_endpoint();
  so.replay_endpoint = loop->kv_events_replay_endpoint();
  auto sub = kv_events::Subscriber::Connect(so);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_EQ(kv_events::EventName(EventsUntil(**sub, "AllBlocksCleared").back()),
            "AllBlocksCleared");

  std::vector<int32_t> prompt(40);
  std::iota(prompt.begin(), prompt.end(), 3);
  Generate(*loop, "a", prompt);
  const std::vector<kv_events::Event> stored = EventsUntil(**sub, "BlockStored");
  ASSERT_FALSE(stored.empty());
  ASSERT_TRUE(std::holds_alternative<kv_events::BlockStored>(stored.back()));
  const auto& e = std::get<kv_events::BlockStored>(stored.back());
  const uint64_t salt = loop->prefix_hash_salt();
  const uint64_t h0 = kv::HashBlockTokens(salt, 0, std::span(prompt).subspan(0, kBlock));
  const uint64_t h1 = kv::HashBlockTokens(salt, h0, std::span(prompt).subspan(kBlock, kBlock));
  EXPECT_EQ(e.block_hashes, (std::vector<uint64_t>{h0, h1}));
  EXPECT_EQ(e.parent_block_hash, std::nullopt);
  EXPECT_EQ(e.token_ids, std::vector<int32_t>(prompt.begin(), prompt.begin() + 2 * kBlock));
  EXPECT_EQ(e.block_size, kBlock);
  EXPECT_EQ(e.medium, std::optional<std::string>("CPU"));

  // Another prompt needing every block evicts the first one's two.
  std::vector<int32_t> other(6 * kBlock - 8, 7);
  Generate(*loop, "b", other);
  std::set<uint64_t> removed;
  while (removed.size() < 2) {
    const std::vector<kv_events::Event> later = EventsUntil(**sub, "BlockRemoved");
    ASSERT_FALSE(later.empty());
    for (const kv_events::Event& e : later) {
      if (const auto* r = std::get_if<kv_events::BlockRemoved>(&e)) {
        removed.insert(r->block_hashes.begin(), r->block_hashes.end());
      }
    }
  }
  EXPECT_EQ(removed, (std::set<uint64_t>{h0, h1}));
  EXPECT_EQ((*sub)->stats().garbage, 0);
  // The publisher counts a batch once it has sent it: the subscriber can be a moment ahead.
  for (int i = 0; i < 500 && loop->kv_events_stats().published < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(loop->kv_events_stats().published, 3);
}

std::unique_ptr<kv_events::Subscriber> Subscribe(const EngineLoop& loop) {
  kv_events::SubscriberOptions so;
  so.endpoint = loop.kv_events_endpoint();
  so.replay_endpoint = loop.kv_events_replay_endpoint();
  auto sub = kv_events::Subscriber::Connect(so);
  EXPECT_TRUE(sub.ok()) << sub.status();
  return sub.ok() ? std::move(*sub) : nullptr;
}

// The hashes of `medium`'s BlockStored events until both of `want` came.
std::set<uint64_t> StoredIn(kv_events::Subscriber& s, std::string_view medium,
                            const std::set<uint64_t>& want) {
  std::set<uint64_t> got;
  for (int i = 0; i < 20 && !std::includes(got.begin(), got.end(), want.begin(), want.end()); ++i) {
    for (const kv_events::Event& e : EventsUntil(s, "BlockStored")) {
      const auto* st = std::get_if<kv_events::BlockStored>(&e);
      if (st != nullptr && st->medium == std::optional<std::string>(medium)) {
        got.insert(st->block_hashes.begin(), st->block_hashes.end());
      }
    }
  }
  return got;
}

TEST(KvEventsTest, DiskTierBlocksAreStorageEventsAlsoAfterARestart) {
  const std::string dir = ::testing::TempDir() + "kvf_events_offload_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::vector<int32_t> prompt(40);
  std::iota(prompt.begin(), prompt.end(), 3);
  std::set<uint64_t> want;
  {
    auto loop = StartLoop(/*num_blocks=*/6, dir);
    auto sub = Subscribe(*loop);
    ASSERT_NE(sub, nullptr);
    Generate(*loop, "a", prompt);
    const std::vector<uint64_t> h = kv::ChainHashes(loop->prefix_hash_salt(), 0, kBlock, prompt);
    want = {h[0], h[1]};
    EXPECT_EQ(StoredIn(*sub, "STORAGE", want), want);
  }
  // A restarted instance announces the blocks its disk still holds, with no request at all.
  auto loop = StartLoop(/*num_blocks=*/6, dir);
  auto sub = Subscribe(*loop);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(StoredIn(*sub, "STORAGE", want), want);
  std::filesystem::remove_all(dir);
}

TEST(KvEventsTest, TheSeedChangesTheSalt) {
  EngineLoopOptions a;
  a.engine.model = "tiny";
  a.engine.num_kv_blocks = 8;
  EngineLoopOptions b = a;
  b.engine.prefix_hash_seed = 1;
  auto la = EngineLoop::Start(std::move(a), nullptr);
  auto lb = EngineLoop::Start(std::move(b), nullptr);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_NE((*la)->prefix_hash_salt(), (*lb)->prefix_hash_salt());
  EXPECT_EQ((*la)->kv_events_endpoint(), "");
}

}  // namespace
}  // namespace kvferry::server
