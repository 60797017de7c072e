#include "bench/transfer/xfer_ceilings.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "kvferry/common/child_process.h"

namespace kvferry::bench {
namespace {

std::string RunCapture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// `cmd` under /bin/sh in a process group of its own (what it starts goes with it); nothing if
// fork fails.
std::optional<ChildProcess> SpawnShell(const std::string& cmd) {
  StatusOr<ChildProcess> c = ChildProcess::Fork(
      [&] {
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        return 127;
      },
      {.new_process_group = true});
  if (!c.ok()) return std::nullopt;
  return std::move(*c);
}

// SIGTERM to the shell's group, a second to end, then SIGKILL.
void KillWait(std::optional<ChildProcess>& shell) {
  if (!shell) return;
  shell->Signal(SIGTERM);
  shell->WaitOrKill(Deadline::AfterMs(1000));
}

}  // namespace

double Iperf3Gbps(uint64_t len) {
  len = std::min<uint64_t>(len, 1 << 20);
  int port = 15201 + static_cast<int>(getpid() % 500);
  std::optional<ChildProcess> srv =
      SpawnShell("exec iperf3 -s -1 -p " + std::to_string(port) + " >/dev/null 2>&1");
  usleep(300'000);
  std::string out = RunCapture("iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -t 2 -l " +
                               std::to_string(len) + " -J 2>/dev/null");
  KillWait(srv);
  try {
    auto j = nlohmann::json::parse(out);
    return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8 / 1e9;
  } catch (...) {
    return -1;
  }
}

double UcxPerftestGbps(bool over_tcp, const std::string& test, uint64_t len) {
  int port = 16201 + static_cast<int>(getpid() % 500);
  std::string tls = over_tcp ? "tcp" : "shm,self";
  uint64_t iters = std::clamp<uint64_t>((512ull << 20) / len, 20, 20000);
  std::string env = "UCX_TLS=" + tls + " UCX_WARN_UNUSED_ENV_VARS=n ";
  std::optional<ChildProcess> srv = SpawnShell("exec env " + env + "ucx_perftest -p " +
                                               std::to_string(port) + " >/dev/null 2>&1");
  usleep(300'000);
  std::string out = RunCapture("timeout 60 env " + env + "ucx_perftest 127.0.0.1 -p " +
                               std::to_string(port) + " -t " + test + " -s " + std::to_string(len) +
                               " -n " + std::to_string(iters) + " -w 10 2>/dev/null");
  KillWait(srv);
  auto pos = out.find("Final:");
  if (pos == std::string::npos) return -1;
  std::istringstream in(out.substr(pos + 6));
  double iter, p50, avg, overall, bw_avg, bw_overall;
  if (!(in >> iter >> p50 >> avg >> overall >> bw_avg >> bw_overall)) return -1;
  return bw_overall * 1048576.0 / 1e9;  // ucx_perftest's MB is 2^20 bytes
}

}  // namespace kvferry::bench
