// The UCX backend in one process, over TCP: what it keeps per peer does not outlive the peer.
// A long-running decode instance meets thousands of prefill instances (and a prefill instance
// thousands of decode instances); the error-callback argument of each endpoint must be freed
// when that endpoint closes, not when the agent is destroyed.
#include "transfer/backends/ucx/ucx_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace kvferry::transfer::ucx {
namespace {

std::unique_ptr<UcxBackend> StartBackend(const std::string& name) {
  BackendContext ctx;
  ctx.agent_name = name;
  ctx.ucx.transport = UcxTransport::kTcp;
  ctx.deliver_notification = [](Notification) {};
  auto b = std::make_unique<UcxBackend>(std::move(ctx));
  Status s = b->Start();
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? std::move(b) : nullptr;
}

// Closing an endpoint completes asynchronously (the progress thread finishes the close request
// and then frees the argument): wait for the count to reach zero, up to a generous deadline.
size_t ArgsLeftAfterClosesSettle(const UcxBackend& b, Deadline until) {
  size_t n = b.NumErrorCallbackArgsForTesting();
  while (n != 0 && !until.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = b.NumErrorCallbackArgsForTesting();
  }
  return n;
}

// READs the first local.size() bytes of the peer's region 1 into local region 1, as a decode
// instance does after connecting.
Status ReadFromPeer(UcxBackend& b, uint32_t peer_id, std::vector<uint8_t>& local) {
  auto done = std::make_shared<Completion>(Deadline::AfterMs(30'000));
  Segment seg{.local_addr = local.data(),
              .local_region = 1,
              .remote_region = 1,
              .remote_offset = 0,
              .length = local.size()};
  KVF_RETURN_IF_ERROR(b.Post(peer_id, XferOp::kRead, {seg}, "", done));
  b.Drive(done, done->deadline());
  return done->done() ? done->status() : DeadlineExceededError("the read did not finish");
}

TEST(UcxBackendTest, PeerEndpointArgumentsFreedWhenPeersAreRemoved) {
  // Registered memory outlives the backends that registered it.
  std::vector<uint8_t> remote(4096, 7), local(64, 0);
  auto initiator = StartBackend("args-initiator");
  auto target = StartBackend("args-target");
  ASSERT_TRUE(initiator && target);
  ASSERT_TRUE(target->RegisterMemory(1, remote.data(), remote.size()).ok());
  ASSERT_TRUE(initiator->RegisterMemory(1, local.data(), local.size()).ok());
  auto blob = target->LocalBlob();
  ASSERT_TRUE(blob.ok()) << blob.status();
  constexpr uint32_t kPeers = 200;
  for (uint32_t id = 1; id <= kPeers; ++id) {
    Status s = initiator->AddPeer(id, "args-target", *blob);
    ASSERT_TRUE(s.ok()) << s;
    s = ReadFromPeer(*initiator, id, local);
    ASSERT_TRUE(s.ok()) << s;
    initiator->RemovePeer(id);
  }
  EXPECT_EQ(ArgsLeftAfterClosesSettle(*initiator, Deadline::AfterMs(30'000)), 0u);
}

// The target answers READs through an endpoint of its own back to each initiator (the back
// channel); it closes when the initiator goes away, and its argument must go with it.
TEST(UcxBackendTest, BackChannelArgumentsFreedWhenInitiatorsGo) {
  std::vector<uint8_t> remote(4096, 7);
  auto target = StartBackend("back-target");
  ASSERT_TRUE(target);
  ASSERT_TRUE(target->RegisterMemory(1, remote.data(), remote.size()).ok());
  auto blob = target->LocalBlob();
  ASSERT_TRUE(blob.ok()) << blob.status();
  constexpr int kInitiators = 8;
  for (int i = 0; i < kInitiators; ++i) {
    std::vector<uint8_t> local(64, 0);
    auto initiator = StartBackend("back-initiator-" + std::to_string(i));
    ASSERT_TRUE(initiator);
    ASSERT_TRUE(initiator->RegisterMemory(1, local.data(), local.size()).ok());
    Status s = initiator->AddPeer(1, "back-target", *blob);
    ASSERT_TRUE(s.ok()) << s;
    s = ReadFromPeer(*initiator, 1, local);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(local[63], 7);
  }  // each initiator's worker goes away here: the target's back channel to it fails
  EXPECT_EQ(ArgsLeftAfterClosesSettle(*target, Deadline::AfterMs(30'000)), 0u);
}

}  // namespace
}  // namespace kvferry::transfer::ucx
