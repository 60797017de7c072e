// P and D in two processes over a real transfer backend (UCX, and the socket backend): P (a
// forked child) prefills and hands its kv_transfer_params to D (the parent) through a pipe, as a
// proxy would; D pulls and
// its output must equal colocated output bit for bit; P frees on D's notification. And a P
// that dies before D pulls is a handshake failure D recovers from by recomputing.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "kvferry/common/child_process.h"
#include "pd_harness.h"

namespace kvferry::pd_test {
namespace {

using kv::Layout;

connector::KvTransferConfig ConfigFor(transfer::BackendKind backend, bool heap_cache = false) {
  connector::KvTransferConfig c;
  c.cache_in_agent_memory = !heap_cache;
  c.backend = backend;
  c.handshake_timeout_ms = 3000;
  c.transfer_timeout_ms = 10000;
  c.lease_ms = 15000;
  return c;
}

// Child: P. Writes one line of JSON (the params) to `fd`, then serves until its blocks are freed.
// Exit codes: 0 freed by D's notification, 2 setup failed, 3 not freed in time, 4 not clean.
[[noreturn]] void RunPrefillChild(int fd, transfer::BackendKind backend, const InstanceSpec& spec,
                                  const std::vector<int32_t>& prompt, bool die_after_params,
                                  bool heap_cache) {
  auto p = MakeInstance("P-2p", spec, ConfigFor(backend, heap_cache));
  if (!p) _exit(2);
  auto params = Prefill(*p, "remote-req", prompt);
  if (!params) _exit(2);
  std::string line = connector::ToJson(*params).dump() + "\n";
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(2);
  close(fd);
  if (die_after_params) _exit(0);  // no destructors: like a crash
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p->engine()->HasWork() && std::chrono::steady_clock::now() < deadline) {
    p->engine()->Step();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (p->engine()->HasWork()) _exit(3);
  const engine::EngineStats s = p->engine()->stats();
  if (s.num_blocks_used != 0 || s.num_blocks_held != 0) _exit(4);
  if (p->connector()->Stats().leases_released_by_notification != 1) _exit(3);
  p.reset();
  _exit(0);
}

// Reads one line from `fd` within `timeout_ms`.
std::string ReadLine(int fd, int timeout_ms) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char c = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) break;
    if (c == '\n') return out;
    out.push_back(c);
  }
  return out;
}

// Waits for the child within `timeout_ms`; returns its exit code, or -1 (killed by a signal,
// or past the deadline: then it is killed).
int WaitChild(ChildProcess& child, int timeout_ms) {
  return child.WaitOrKill(Deadline::AfterMs(timeout_ms)).ExitCodeOr(-1);
}

struct TwoProcessResult {
  Completion d_out;
  int child_exit = -1;
  connector::ConnectorStats d_stats;
  std::vector<kv::LogicalBlockId> invalid;
  bool d_clean = false;
};

TwoProcessResult RunTwoProcess(transfer::BackendKind backend, const InstanceSpec& p_spec,
                               const InstanceSpec& d_spec, const std::vector<int32_t>& prompt,
                               bool p_dies, bool heap_cache = false) {
  TwoProcessResult result;
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe";
    return result;
  }
  StatusOr<ChildProcess> forked = ChildProcess::Fork([&]() -> int {
    close(fds[0]);
    RunPrefillChild(fds[1], backend, p_spec, prompt, p_dies, heap_cache);
  });
  close(fds[1]);
  if (!forked.ok()) {
    ADD_FAILURE() << forked.status();
    close(fds[0]);
    return result;
  }
  ChildProcess& child = *forked;
  std::string line = ReadLine(fds[0], 30000);
  close(fds[0]);
  if (line.empty()) {
    ADD_FAILURE() << "P sent no kv_transfer_params";
    WaitChild(child, 1000);
    return result;
  }
  auto params = connector::ParseKvTransferParams(nlohmann::json::parse(line));
  EXPECT_TRUE(params.ok()) << params.status();
  if (p_dies) WaitChild(child, 10000);  // make sure it is gone before D pulls
  auto d = MakeInstance("D-2p", d_spec, ConfigFor(backend, heap_cache));
  if (!d || !params.ok()) {
    WaitChild(child, 1000);
    return result;
  }
  EXPECT_TRUE(d->engine()->AddRequest("local-req", prompt, Greedy(4), *params).ok());
  result.d_out = RunAll({d->engine()}, 30000)["local-req"];
  result.d_stats = d->connector()->Stats();
  result.invalid = d->worker->invalid;
  const engine::EngineStats s = d->engine()->stats();
  result.d_clean = s.num_blocks_used == 0 && s.num_blocks_held == 0;
  result.child_exit = p_dies ? 0 : WaitChild(child, 30000);
  return result;
}

class PdTwoProcessTest : public ::testing::TestWithParam<transfer::BackendKind> {};

TEST_P(PdTwoProcessTest, PullEqualsColocated) {
  const std::vector<int32_t> prompt = MakePrompt(600, 3);
  // P: the seed's geometry (logical 128, kernel 64, NHD); D: logical 64, HND, host buffer.
  TwoProcessResult r = RunTwoProcess(GetParam(), {128, "flash", Layout::kNHD, false},
                                     {64, "paged", Layout::kHND, true}, prompt, false);
  ASSERT_TRUE(r.d_out.finished);
  const Completion reference = Colocated(prompt, Greedy(4));
  ExpectSame(r.d_out, reference, "two processes");
  EXPECT_EQ(r.d_out.num_cached_tokens, 600);  // every prompt token (D resumes after P's first)
  EXPECT_TRUE(r.invalid.empty());
  ExpectPulled(r.d_out, 600, TinyPullBytes(64, 0, 600), "two processes");
  // Re-layout: D reads into registered staging from P's cache, mapped over UCX.
  EXPECT_EQ(r.d_stats.bytes_by_memcpy,
            GetParam() == transfer::BackendKind::kUcx ? r.d_stats.bytes : 0u);
  EXPECT_EQ(r.d_stats.transfers, 1u);
  std::printf(
      "%s pull (P 128/64 NHD -> D 64 HND host buffer, 600 tokens): %llu bytes, "
      "%llu descriptors, %llu us\n",
      std::string(transfer::BackendKindName(GetParam())).c_str(),
      static_cast<unsigned long long>(r.d_stats.bytes),
      static_cast<unsigned long long>(r.d_stats.descriptors),
      static_cast<unsigned long long>(r.d_stats.duration_us_total));
  EXPECT_EQ(r.child_exit, 0) << "P did not free its blocks on D's notification";
  EXPECT_TRUE(r.d_clean);
}

TEST_P(PdTwoProcessTest, DirectReadEqualGeometry) {
  const std::vector<int32_t> prompt = MakePrompt(300, 4);
  // The cache from the agent (the default), then from the heap (cache_in_agent_memory false).
  for (const bool heap_cache : {false, true}) {
    SCOPED_TRACE(heap_cache ? "heap cache" : "cache in agent memory");
    TwoProcessResult r =
        RunTwoProcess(GetParam(), {64, "paged", Layout::kHND, false},
                      {128, "flash", Layout::kHND, false}, prompt, false, heap_cache);
    ASSERT_TRUE(r.d_out.finished);
    ExpectSame(r.d_out, Colocated(prompt, Greedy(4)), "direct read");
    // Pulled, not recomputed: tokens [0, 300) in P's 5 kernel blocks of 64.
    ExpectPulled(r.d_out, 300, TinyPullBytes(64, 0, 300), "direct read");
    // Over UCX P's agent-allocated cache is shared memory mapped into D: one memcpy, all of
    // it; a heap cache is user memory, and the socket backend has no shareable memory.
    const bool mapped = GetParam() == transfer::BackendKind::kUcx && !heap_cache;
    EXPECT_EQ(r.d_out.kv_load->bytes_by_memcpy, mapped ? r.d_out.kv_load->bytes : 0u);
    EXPECT_EQ(r.d_stats.bytes_by_memcpy, mapped ? r.d_stats.bytes : 0u);
    EXPECT_EQ(r.d_stats.transfers, 1u);
    EXPECT_EQ(r.d_stats.failures_handshake + r.d_stats.failures_transfer +
                  r.d_stats.failures_deadline + r.d_stats.failures_generation,
              0u);
    EXPECT_EQ(r.child_exit, 0);
    EXPECT_TRUE(r.d_clean);
  }
}

TEST_P(PdTwoProcessTest, PrefillDiesBeforePull) {
  const std::vector<int32_t> prompt = MakePrompt(300, 5);
  auto t0 = std::chrono::steady_clock::now();
  TwoProcessResult r = RunTwoProcess(GetParam(), {128, "flash", Layout::kNHD, false},
                                     {128, "flash", Layout::kNHD, false}, prompt, true);
  ASSERT_TRUE(r.d_out.finished);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ExpectSame(r.d_out, Colocated(prompt, Greedy(4)), "recomputed after P died");
  EXPECT_EQ(r.d_stats.failures_handshake, 1u);
  ASSERT_TRUE(r.d_out.kv_load.has_value());
  EXPECT_EQ(r.d_out.kv_load->outcome, connector::LoadOutcome::kFailedHandshake);
  EXPECT_EQ(r.invalid.size(), 3u);  // D's 3 logical blocks of 128 for 300 tokens
  EXPECT_TRUE(r.d_clean);
}

// Different tensor-parallel sizes across processes: P at TP 2 (one agent per rank, each serving
// its own KV heads) and D at TP 1 reading each head from the rank holding it, and the reverse.
TEST_P(PdTwoProcessTest, AcrossTpSizes) {
  const std::vector<int32_t> prompt = MakePrompt(400, 6);
  const Completion reference = Colocated(prompt, Greedy(4));
  for (auto [p_tp, d_tp] : {std::pair{2, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE("P tp " + std::to_string(p_tp) + ", D tp " + std::to_string(d_tp));
    InstanceSpec ps{128, "flash", Layout::kNHD, p_tp == 2}, ds{16, "flash", Layout::kHND, false};
    ps.tp = p_tp;
    ds.tp = d_tp;
    TwoProcessResult r = RunTwoProcess(GetParam(), ps, ds, prompt, false);
    ASSERT_TRUE(r.d_out.finished);
    ExpectSame(r.d_out, reference, "across TP sizes");
    ExpectPulled(r.d_out, 400, TinyPullBytes(64, 0, 400), "across TP sizes");
    ASSERT_TRUE(r.d_out.kv_load.has_value());
    ASSERT_EQ(r.d_out.kv_load->ranks.size(), static_cast<size_t>(d_tp));
    for (const connector::RankLoad& rank : r.d_out.kv_load->ranks) {
      EXPECT_EQ(rank.bytes, RankPullBytes("tiny", d_tp, 64, 0, 399));
      EXPECT_EQ(rank.source_ranks.size(), d_tp == 1 ? 2u : 1u);
    }
    EXPECT_TRUE(r.invalid.empty());
    EXPECT_EQ(r.child_exit, 0) << "P did not free its blocks on D's notifications";
    EXPECT_TRUE(r.d_clean);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PdTwoProcessTest,
                         ::testing::Values(transfer::BackendKind::kUcx,
                                           transfer::BackendKind::kSocket),
                         [](const auto& info) {
                           return std::string(transfer::BackendKindName(info.param));
                         });

}  // namespace
}  // namespace kvferry::pd_test
