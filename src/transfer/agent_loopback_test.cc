// The Agent's contract over the loopback backend: validation before posting, merging,
// READ/WRITE, notifications, fault injection.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "kvferry/transfer/agent.h"
#include "kvferry/transfer/loopback.h"

namespace kvferry::transfer {
namespace {

struct Pair {
  std::unique_ptr<Agent> a, b;
  std::vector<uint8_t> abuf, bbuf;
  RegionHandle ar, br;
  PeerHandle b_from_a;
};

Pair MakePair(const std::string& tag, size_t bytes = 1 << 16) {
  Pair p;
  p.a = std::move(*Agent::Create({.name = tag + "-a", .backend = BackendKind::kLoopback}));
  p.b = std::move(*Agent::Create({.name = tag + "-b", .backend = BackendKind::kLoopback}));
  p.abuf.resize(bytes);
  p.bbuf.resize(bytes);
  std::iota(p.abuf.begin(), p.abuf.end(), 0);
  std::iota(p.bbuf.begin(), p.bbuf.end(), 100);
  p.ar = *p.a->RegisterMemory(p.abuf.data(), bytes, MemoryKind::kHost);
  p.br = *p.b->RegisterMemory(p.bbuf.data(), bytes, MemoryKind::kHost);
  p.b_from_a = *p.a->LoadRemoteMetadata(*p.b->GetLocalMetadata());
  return p;
}

TEST(AgentLoopbackTest, CreateRejectsEmptyName) {
  EXPECT_EQ(Agent::Create({.name = "", .backend = BackendKind::kLoopback}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AgentLoopbackTest, DeviceMemoryIsUnimplemented) {
  auto a = *Agent::Create({.name = "dev", .backend = BackendKind::kLoopback});
  char buf[16];
  EXPECT_EQ(a->RegisterMemory(buf, 16, MemoryKind::kDevice).status().code(),
            StatusCode::kUnimplemented);
}

TEST(AgentLoopbackTest, AllocatedMemoryIsAlignedZeroedRegisteredAndFreed) {
  auto a = *Agent::Create({.name = "alloc", .backend = BackendKind::kLoopback});
  EXPECT_EQ(a->AllocateMemory(0).status().code(), StatusCode::kInvalidArgument);
  auto m = a->AllocateMemory(10000);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_NE(m->addr, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->addr) % 4096, 0u);
  const auto* bytes = static_cast<const uint8_t*>(m->addr);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(bytes[i], 0) << i;
  // Registered: a transfer may name it; out of its range is refused.
  auto b = *Agent::Create({.name = "alloc-peer", .backend = BackendKind::kLoopback});
  char remote[64] = {};
  auto rr = *b->RegisterMemory(remote, sizeof(remote), MemoryKind::kHost);
  auto peer = *a->LoadRemoteMetadata(*b->GetLocalMetadata());
  EXPECT_TRUE(a->PrepareTransfer({.op = XferOp::kRead,
                                  .peer = peer,
                                  .local = {{m->region, 9936, 64}},
                                  .remote = {{rr, 0, 64}}})
                  .ok());
  EXPECT_EQ(a->PrepareTransfer({.op = XferOp::kRead,
                                .peer = peer,
                                .local = {{m->region, 9937, 64}},
                                .remote = {{rr, 0, 64}}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(a->DeregisterMemory(m->region).ok());  // frees it (ASan would see a leak)
  EXPECT_EQ(a->DeregisterMemory(m->region).code(), StatusCode::kNotFound);
  EXPECT_TRUE(a->AllocateMemory(4096).ok());  // freed by the agent's destructor
}

TEST(AgentLoopbackTest, BackendKindNamesRoundTrip) {
  for (BackendKind k : {BackendKind::kUcx, BackendKind::kLoopback, BackendKind::kSocket}) {
    auto parsed = ParseBackendKind(BackendKindName(k));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_EQ(*ParseBackendKind("UCX"), BackendKind::kUcx);
  EXPECT_EQ(ParseBackendKind("rdma").status().code(), StatusCode::kInvalidArgument);
}

TEST(AgentLoopbackTest, UcxTransportNamesRoundTrip) {
  for (UcxTransport t : {UcxTransport::kAuto, UcxTransport::kTcp, UcxTransport::kShm}) {
    auto parsed = ParseUcxTransport(UcxTransportName(t));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(ParseUcxTransport("rdma").status().code(), StatusCode::kInvalidArgument);
}

TEST(AgentLoopbackTest, GarbageMetadataIsInvalidArgument) {
  auto a = *Agent::Create({.name = "garbage", .backend = BackendKind::kLoopback});
  EXPECT_EQ(a->LoadRemoteMetadata("not a blob").status().code(), StatusCode::kInvalidArgument);
}

TEST(AgentLoopbackTest, WriteAndReadMoveExactBytesAndNotify) {
  Pair p = MakePair("rw");
  auto w = p.a->PrepareTransfer({.op = XferOp::kWrite,
                                 .peer = p.b_from_a,
                                 .local = {{p.ar, 0, 100}, {p.ar, 100, 100}, {p.ar, 500, 8}},
                                 .remote = {{p.br, 1000, 100}, {p.br, 1100, 100}, {p.br, 0, 8}},
                                 .notification = "wrote"});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(p.a->GetXferInfo(*w)->num_descriptors_merged, 2u);
  EXPECT_EQ(p.a->GetXferInfo(*w)->total_bytes, 208u);
  ASSERT_TRUE(p.a->Post(*w).ok());
  ASSERT_TRUE(p.a->Wait(*w, Deadline::AfterMs(5000)).ok());
  EXPECT_EQ(0, std::memcmp(&p.bbuf[1000], &p.abuf[0], 200));
  EXPECT_EQ(0, std::memcmp(&p.bbuf[0], &p.abuf[500], 8));
  auto n = p.b->WaitNotifications(Deadline::AfterMs(1000));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].peer_name, "rw-a");
  EXPECT_EQ(n[0].message, "wrote");
  ASSERT_TRUE(p.a->Release(*w).ok());

  auto r = p.a->PrepareTransfer({.op = XferOp::kRead,
                                 .peer = p.b_from_a,
                                 .local = {{p.ar, 4096, 64}},
                                 .remote = {{p.br, 8192, 64}}});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(p.a->Post(*r).ok());
  ASSERT_TRUE(p.a->Wait(*r, Deadline::AfterMs(5000)).ok());
  EXPECT_EQ(0, std::memcmp(&p.abuf[4096], &p.bbuf[8192], 64));
  EXPECT_TRUE(p.b->GetNotifications().empty());
}

TEST(AgentLoopbackTest, DescriptorOutOfRangeIsInvalidArgumentBeforePosting) {
  Pair p = MakePair("oor", 4096);
  auto x = p.a->PrepareTransfer({.op = XferOp::kWrite,
                                 .peer = p.b_from_a,
                                 .local = {{p.ar, 0, 64}},
                                 .remote = {{p.br, 4090, 64}}});
  EXPECT_EQ(x.status().code(), StatusCode::kInvalidArgument);
  x = p.a->PrepareTransfer({.op = XferOp::kWrite,
                            .peer = p.b_from_a,
                            .local = {{p.ar, 4095, 2}},
                            .remote = {{p.br, 0, 2}}});
  EXPECT_EQ(x.status().code(), StatusCode::kInvalidArgument);
  x = p.a->PrepareTransfer({.op = XferOp::kWrite,
                            .peer = p.b_from_a,
                            .local = {{p.ar, 0, 64}},
                            .remote = {{p.br, 0, 63}}});
  EXPECT_EQ(x.status().code(), StatusCode::kInvalidArgument);
  x = p.a->PrepareTransfer(
      {.op = XferOp::kWrite, .peer = p.b_from_a, .local = {{p.ar, 0, 64}}, .remote = {}});
  EXPECT_EQ(x.status().code(), StatusCode::kInvalidArgument);
  x = p.a->PrepareTransfer({.op = XferOp::kWrite,
                            .peer = p.b_from_a,
                            .local = {{p.ar, 0, 64}},
                            .remote = {{RegionHandle{99}, 0, 64}}});
  EXPECT_EQ(x.status().code(), StatusCode::kNotFound);
}

TEST(AgentLoopbackTest, InjectedFailureAndStall) {
  Pair p = MakePair("fault");
  auto x = *p.a->PrepareTransfer({.op = XferOp::kWrite,
                                  .peer = p.b_from_a,
                                  .local = {{p.ar, 0, 64}},
                                  .remote = {{p.br, 0, 64}},
                                  .notification = "n",
                                  .timeout_ms = 300});
  ASSERT_TRUE(loopback::InjectFault("fault-a", loopback::Fault::kFailNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_EQ(p.a->Wait(x, Deadline::AfterMs(5000)).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(loopback::InjectFault("fault-a", loopback::Fault::kStallNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(p.a->Wait(x, Deadline::AfterMs(5000)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_TRUE(p.b->GetNotifications().empty());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_TRUE(p.a->Wait(x, Deadline::AfterMs(5000)).ok());
  EXPECT_EQ(p.b->GetNotifications().size(), 1u);
}

TEST(AgentLoopbackTest, TargetFaultHitsTransfersToThatAgentOnly) {
  Pair p = MakePair("target");
  auto x = *p.a->PrepareTransfer({.op = XferOp::kRead,
                                  .peer = p.b_from_a,
                                  .local = {{p.ar, 0, 64}},
                                  .remote = {{p.br, 0, 64}},
                                  .timeout_ms = 300});
  // A fault on the initiator "target-a" as a target does not touch a's own transfers.
  ASSERT_TRUE(loopback::InjectTargetFault("target-a", loopback::Fault::kFailNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_TRUE(p.a->Wait(x, Deadline::AfterMs(5000)).ok());
  loopback::ClearFaults("target-a");
  ASSERT_TRUE(loopback::InjectTargetFault("target-b", loopback::Fault::kFailNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_EQ(p.a->Wait(x, Deadline::AfterMs(5000)).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(loopback::InjectTargetFault("target-b", loopback::Fault::kStallNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_EQ(p.a->Wait(x, Deadline::AfterMs(5000)).code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_TRUE(p.a->Wait(x, Deadline::AfterMs(5000)).ok());
  EXPECT_EQ(loopback::InjectTargetFault("nobody", loopback::Fault::kFailNext).code(),
            StatusCode::kNotFound);
}

TEST(AgentLoopbackTest, PostWhileInFlightIsFailedPrecondition) {
  Pair p = MakePair("inflight");
  auto x = *p.a->PrepareTransfer({.op = XferOp::kWrite,
                                  .peer = p.b_from_a,
                                  .local = {{p.ar, 0, 64}},
                                  .remote = {{p.br, 0, 64}},
                                  .timeout_ms = 5000});
  ASSERT_TRUE(loopback::InjectFault("inflight-a", loopback::Fault::kStallNext).ok());
  ASSERT_TRUE(p.a->Post(x).ok());
  EXPECT_EQ(p.a->Post(x).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*p.a->Poll(x), XferState::kInProgress);
  EXPECT_TRUE(p.a->Release(x).ok());
  EXPECT_EQ(p.a->Poll(x).status().code(), StatusCode::kNotFound);
}

TEST(AgentLoopbackTest, PeerGoneIsUnavailable) {
  Pair p = MakePair("gone");
  auto x = *p.a->PrepareTransfer({.op = XferOp::kWrite,
                                  .peer = p.b_from_a,
                                  .local = {{p.ar, 0, 64}},
                                  .remote = {{p.br, 0, 64}}});
  p.b.reset();
  EXPECT_EQ(p.a->Post(x).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvferry::transfer
