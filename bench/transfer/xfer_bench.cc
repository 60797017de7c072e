// See xfer_bench.h. Layout: helpers, the target role, ceilings, the sweep.
#include "bench/transfer/xfer_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/plot/svg_plot.h"
#include "kvferry/common/frame_socket.h"
#include "kvferry/common/logging.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::bench {
namespace {

using namespace kvferry::transfer;  // NOLINT
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// "tcp" / "shm": UCX with that transport; "shm-mapped": UCX shared memory, the target's buffer
// from Agent::AllocateMemory (the initiator maps it); "socket": the socket backend (TCP),
// listening on `listen_host` (the address the initiator reaches this side at).
AgentOptions MakeAgentOptions(const std::string& name, const std::string& transport,
                              const std::string& data_path,
                              const std::string& listen_host = "127.0.0.1") {
  AgentOptions o{.name = name, .backend = BackendKind::kUcx, .ucx = {}, .socket = {}};
  if (transport == "socket") {
    o.backend = BackendKind::kSocket;
    o.socket.listen_host = listen_host;
    return o;
  }
  o.ucx.transport = transport == "tcp" ? UcxTransport::kTcp : UcxTransport::kShm;
  o.ucx.data_path = data_path == "rma"  ? UcxDataPath::kRma
                    : data_path == "am" ? UcxDataPath::kActiveMessage
                                        : UcxDataPath::kAuto;
  return o;
}

// Both TCP paths (UCX over tcp, the socket backend) have the kernel's TCP stream as ceiling.
bool OverTcp(const std::string& transport) { return transport == "tcp" || transport == "socket"; }

uint8_t* AllocTouched(uint64_t bytes, uint8_t seed) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
  auto* b = static_cast<uint8_t*>(p);
  for (uint64_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(i * 7 + seed);
  return b;
}

// ---- target role ----------------------------------------------------------------------------

int AcceptOn(const std::string& listen) {
  std::string port = listen.substr(listen.rfind(':') + 1);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  a.sin_addr.s_addr = INADDR_ANY;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s, 1) != 0) {
    return -1;
  }
  int c = accept(s, nullptr, nullptr);
  close(s);
  return c;
}

int RunTarget(const XferBenchOptions& o) {
  int fd = o.ctl_fd;
  if (!o.listen.empty()) {
    std::fprintf(stderr, "target: waiting for the initiator on %s\n", o.listen.c_str());
    fd = AcceptOn(o.listen);
  }
  if (fd < 0) return 2;
  const size_t colon = o.listen.rfind(':');
  const std::string host =
      colon == std::string::npos || colon == 0 ? "127.0.0.1" : o.listen.substr(0, colon);
  auto agent = Agent::Create(MakeAgentOptions("bench-target", o.transport, o.data_path, host));
  if (!agent.ok()) {
    std::fprintf(stderr, "target: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  uint8_t* buf = nullptr;
  StatusOr<RegionHandle> region = NotFoundError("not registered");
  if (o.transport == "shm-mapped") {
    auto m = (*agent)->AllocateMemory(o.working_set_bytes);
    if (m.ok()) {
      buf = static_cast<uint8_t*>(m->addr);
      for (uint64_t i = 0; i < o.working_set_bytes; ++i) buf[i] = static_cast<uint8_t>(i * 7 + 3);
      region = m->region;
    }
  } else {
    buf = AllocTouched(o.working_set_bytes, 3);
    if (buf != nullptr)
      region = (*agent)->RegisterMemory(buf, o.working_set_bytes, MemoryKind::kHost);
  }
  if (!buf || !region.ok()) return 1;
  SendFrame(fd, *(*agent)->GetLocalMetadata());
  SendFrame(fd, std::to_string(region->id) + " " + std::to_string(o.working_set_bytes));
  while (true) {
    auto cmd = RecvFrame(fd, Deadline::AfterMs(3'600'000));
    if (!cmd || *cmd == "QUIT") break;
  }
  const bool owned = o.transport != "shm-mapped";
  agent->reset();  // frees an allocated buffer
  if (owned) std::free(buf);
  return 0;
}

// ---- ceilings -------------------------------------------------------------------------------

// Cold memcpy: `desc_bytes` pieces over the whole working set (src and dst larger than caches).
double MemcpyGbps(uint8_t* dst, const uint8_t* src, uint64_t ws, uint64_t desc_bytes) {
  double best = 0;
  for (int pass = 0; pass < 2; ++pass) {
    auto t0 = Clock::now();
    for (uint64_t off = 0; off + desc_bytes <= ws; off += desc_bytes) {
      std::memcpy(dst + off, src + off, desc_bytes);
    }
    best = std::max(best, static_cast<double>(ws) / Seconds(Clock::now() - t0) / 1e9);
  }
  return best;
}

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

pid_t SpawnShell(const std::string& cmd) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

void KillWait(pid_t pid) {
  if (pid <= 0) return;
  kill(-pid, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(20'000);
  }
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// iperf3 single stream over loopback with `len`-byte writes (iperf3 caps writes at 1 MiB).
// GB/s, or < 0 if unavailable.
double Iperf3Gbps(uint64_t len) {
  len = std::min<uint64_t>(len, 1 << 20);
  int port = 15201 + static_cast<int>(getpid() % 500);
  pid_t srv = SpawnShell("exec iperf3 -s -1 -p " + std::to_string(port) + " >/dev/null 2>&1");
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

// ucx_perftest with one message of `len` bytes per iteration. GB/s, or < 0 if unavailable.
double UcxPerftestGbps(const std::string& transport, const std::string& test, uint64_t len) {
  int port = 16201 + static_cast<int>(getpid() % 500);
  std::string tls = OverTcp(transport) ? "tcp" : "shm,self";
  uint64_t iters = std::clamp<uint64_t>((512ull << 20) / len, 20, 20000);
  std::string env = "UCX_TLS=" + tls + " UCX_WARN_UNUSED_ENV_VARS=n ";
  pid_t srv = SpawnShell("exec env " + env + "ucx_perftest -p " + std::to_string(port) +
                         " >/dev/null 2>&1");
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

// ---- contention ------------------------------------------------------------------------------

// `n` threads that keep cores busy (integer work, no memory traffic to speak of) until
// destroyed: the load other work puts on a serving host beside a transfer.
class BusyLoops {
 public:
  explicit BusyLoops(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        uint64_t x = 1;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 4096; ++k) x = x * 6364136223846793005ull + 1442695040888963407ull;
        }
        sink_.fetch_add(x, std::memory_order_relaxed);
      });
    }
  }
  ~BusyLoops() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

// ---- the picture -----------------------------------------------------------------------------

// One panel per op: GB/s against descriptor size for each transport (at its largest batch),
// beside the ceilings measured in the same run (dashed).
Status PlotRows(const nlohmann::json& rows, const XferBenchOptions& o) {
  const uint32_t batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<PlotPanel> panels;
  for (const std::string& op : o.ops) {
    PlotPanel panel{op + ", " + std::to_string(batch) + " descriptors per transfer",
                    "descriptor bytes",
                    "GB/s",
                    true,
                    {}};
    std::map<std::string, PlotSeries> series;  // by title
    auto add = [&series](const std::string& title, bool dashed, double x, double y) {
      PlotSeries& s = series[title];
      s.title = title;
      s.dashed = dashed;
      s.points.emplace_back(x, y);
    };
    for (const nlohmann::json& r : rows) {
      if (r["op"] != op || r["descs_per_xfer"] != batch) continue;
      const double size = r["desc_bytes"].get<double>();
      const std::string t = r["transport"];
      add(t, false, size, r["gbps"].get<double>());
      if (r.contains("ceiling_cold_memcpy_gbps")) {
        add("cold memcpy", true, size, r["ceiling_cold_memcpy_gbps"].get<double>());
      }
      if (r.contains("ceiling_iperf3_gbps")) {
        add("iperf3 (" + t + ")", true, size, r["ceiling_iperf3_gbps"].get<double>());
      }
      if (r.contains("ceiling_ucx_perftest_gbps")) {
        add("ucx_perftest (" + t + ")", true, size, r["ceiling_ucx_perftest_gbps"].get<double>());
      }
    }
    for (auto& [title, s] : series) {
      std::sort(s.points.begin(), s.points.end());
      s.points.erase(std::unique(s.points.begin(), s.points.end()), s.points.end());
      panel.series.push_back(std::move(s));
    }
    panels.push_back(std::move(panel));
  }
  return WriteSvgPlot(panels, o.plot_path, "kvferry bench xfer: transfer throughput");
}

// ---- the sweep ------------------------------------------------------------------------------

struct Row {
  std::string transport, op;
  uint64_t desc_bytes = 0;
  uint32_t descs = 0, merged = 0;
  uint64_t bytes = 0;
  uint64_t xfers = 0;
  double gbps = 0;
  double post_p50_us = 0, post_p99_us = 0, compl_p50_us = 0, compl_p99_us = 0;
  std::string validated = "skipped";
  std::string error;
};

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct Session {
  std::unique_ptr<Agent> agent;
  uint8_t* local = nullptr;
  RegionHandle lr, rr;
  PeerHandle peer;
  uint64_t ws = 0;
};

Row RunPoint(Session& s, const std::string& transport, XferOp op, uint64_t size, uint32_t batch,
             const XferBenchOptions& o) {
  Row row{transport, op == XferOp::kRead ? "read" : "write", size, batch};
  uint64_t per_xfer = size * batch;
  uint64_t nslots = s.ws / per_xfer;
  uint64_t nh = std::min<uint64_t>(nslots, 128);
  uint64_t stride = (nslots / nh) * per_xfer;
  std::vector<XferHandle> hs;
  for (uint64_t j = 0; j < nh; ++j) {
    TransferRequest req{.op = op,
                        .peer = s.peer,
                        .local = {},
                        .remote = {},
                        .notification = "",
                        .timeout_ms = 30'000};
    for (uint32_t i = 0; i < batch; ++i) {
      req.local.push_back({s.lr, j * stride + i * size, size});
      // Reversed on the remote side: pairs are never adjacent on both sides, so no merging.
      req.remote.push_back({s.rr, j * stride + (batch - 1 - i) * size, size});
    }
    auto h = s.agent->PrepareTransfer(req);
    if (!h.ok()) {
      row.error = h.status().ToString();
      return row;
    }
    hs.push_back(*h);
  }
  row.merged = s.agent->GetXferInfo(hs[0])->num_descriptors_merged;
  auto run_one = [&](XferHandle h, double* post_us, double* compl_us) -> Status {
    auto t0 = Clock::now();
    KVF_RETURN_IF_ERROR(s.agent->Post(h));
    auto t1 = Clock::now();
    KVF_RETURN_IF_ERROR(s.agent->Wait(h, Deadline::AfterMs(60'000)));
    auto t2 = Clock::now();
    if (post_us) *post_us = Seconds(t1 - t0) * 1e6;
    if (compl_us) *compl_us = Seconds(t2 - t0) * 1e6;
    return Status::Ok();
  };
  for (int w = 0; w < 2; ++w) {
    Status st = run_one(hs[w % nh], nullptr, nullptr);
    if (!st.ok()) {
      row.error = st.ToString();
      return row;
    }
  }
  std::vector<double> post, compl_;
  auto start = Clock::now();
  auto budget = std::chrono::milliseconds(o.point_ms);
  uint64_t it = 0;
  while ((Clock::now() - start < budget || it < 4) && it < 200'000) {
    double p, c;
    Status st = run_one(hs[it % nh], &p, &c);
    if (!st.ok()) {
      row.error = st.ToString();
      break;
    }
    post.push_back(p);
    compl_.push_back(c);
    ++it;
  }
  double secs = Seconds(Clock::now() - start);
  row.xfers = it;
  row.bytes = it * per_xfer;
  row.gbps = static_cast<double>(row.bytes) / secs / 1e9;
  row.post_p50_us = Pct(post, 0.5);
  row.post_p99_us = Pct(post, 0.99);
  row.compl_p50_us = Pct(compl_, 0.5);
  row.compl_p99_us = Pct(compl_, 0.99);
  if (o.validate && row.error.empty()) {
    // WRITE a seeded pattern through handle 0, wipe the local copy, READ it back, compare.
    uint64_t seed = size * 31 + batch;
    std::vector<uint8_t> expect(per_xfer);
    for (uint64_t i = 0; i < per_xfer; ++i) expect[i] = static_cast<uint8_t>((i * 13 + seed) >> 2);
    TransferRequest w{.op = XferOp::kWrite,
                      .peer = s.peer,
                      .local = {},
                      .remote = {},
                      .notification = "",
                      .timeout_ms = 30'000};
    for (uint32_t i = 0; i < batch; ++i) {
      w.local.push_back({s.lr, i * size, size});
      w.remote.push_back({s.rr, (batch - 1 - i) * size, size});
    }
    std::memcpy(s.local, expect.data(), per_xfer);
    TransferRequest r = w;
    r.op = XferOp::kRead;
    auto hw = s.agent->PrepareTransfer(w);
    auto hr = s.agent->PrepareTransfer(r);
    bool ok = hw.ok() && hr.ok() && run_one(*hw, nullptr, nullptr).ok();
    std::memset(s.local, 0, per_xfer);
    ok = ok && run_one(*hr, nullptr, nullptr).ok() &&
         std::memcmp(s.local, expect.data(), per_xfer) == 0;
    row.validated = ok ? "ok" : "FAILED";
    if (hw.ok()) s.agent->Release(*hw).IgnoreError();
    if (hr.ok()) s.agent->Release(*hr).IgnoreError();
  }
  for (XferHandle h : hs) s.agent->Release(h).IgnoreError();
  return row;
}

int ConnectTo(const std::string& hostport) {
  auto c = hostport.rfind(':');
  std::string host = hostport.substr(0, c), port = hostport.substr(c + 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return -1;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(s, res->ai_addr, res->ai_addrlen) != 0) {
    close(s);
    s = -1;
  }
  freeaddrinfo(res);
  return s;
}

std::string Human(uint64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

int RunXferBench(const XferBenchOptions& o) {
  if (o.role == "target") return RunTarget(o);
  uint64_t ws = o.working_set_bytes;
  std::vector<Row> rows;
  std::map<std::pair<std::string, uint64_t>, double> iperf, perftest, memcpy_gbps;
  std::map<std::pair<std::string, uint64_t>, std::string> perftest_name;
  for (const std::string& transport : o.transports) {
    int fd = -1;
    pid_t child = -1;
    if (!o.connect.empty()) {
      fd = ConnectTo(o.connect);
    } else {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
      child = fork();
      if (child == 0) {
        close(sv[0]);
        std::string exe = "/proc/self/exe";
        std::vector<std::string> args = {"kvferry",
                                         "bench",
                                         "xfer",
                                         "--role",
                                         "target",
                                         "--ctl-fd",
                                         std::to_string(sv[1]),
                                         "--transport",
                                         transport,
                                         "--working-set-mib",
                                         std::to_string(ws >> 20),
                                         "--data-path",
                                         o.data_path};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(exe.c_str(), argv.data());
        _exit(127);
      }
      close(sv[1]);
      fd = sv[0];
    }
    if (fd < 0) {
      std::fprintf(stderr, "bench xfer: cannot reach the target\n");
      return 1;
    }
    Session s;
    s.ws = ws;
    auto agent = Agent::Create(MakeAgentOptions("bench-initiator", transport, o.data_path));
    auto md = RecvFrame(fd, Deadline::AfterMs(60'000));
    auto info = RecvFrame(fd, Deadline::AfterMs(10'000));
    if (!agent.ok() || !md || !info) {
      std::fprintf(stderr, "bench xfer: target for %s did not start\n", transport.c_str());
      return 1;
    }
    s.agent = std::move(*agent);
    uint64_t remote_ws = 0;
    uint32_t rid = 0;
    std::istringstream(*info) >> rid >> remote_ws;
    s.rr = RegionHandle{rid};
    s.ws = std::min(ws, remote_ws);
    s.local = AllocTouched(s.ws, 1);
    s.lr = *s.agent->RegisterMemory(s.local, s.ws, MemoryKind::kHost);
    auto peer = s.agent->LoadRemoteMetadata(*md);
    if (!peer.ok()) {
      std::fprintf(stderr, "bench xfer: %s\n", peer.status().ToString().c_str());
      return 1;
    }
    s.peer = *peer;
    std::optional<BusyLoops> busy;
    if (o.busy_threads > 0) busy.emplace(o.busy_threads);
    for (const std::string& op : o.ops) {
      for (uint64_t size : o.sizes) {
        for (uint32_t batch : o.batches) {
          if (size * batch > s.ws) continue;
          Row r =
              RunPoint(s, transport, op == "read" ? XferOp::kRead : XferOp::kWrite, size, batch, o);
          if (!r.error.empty()) {  // a failed transfer closes the connection: reconnect
            auto again = s.agent->LoadRemoteMetadata(*md);
            if (again.ok()) s.peer = *again;
          }
          if (!o.json) {
            std::fprintf(stderr, "  %-3s %-5s %6s x %-5u %7.3f GB/s %s\n", transport.c_str(),
                         r.op.c_str(), Human(size).c_str(), batch, r.gbps, r.error.c_str());
          }
          rows.push_back(r);
        }
      }
    }
    busy.reset();
    SendFrame(fd, "QUIT");
    s.agent.reset();
    if (child > 0) waitpid(child, nullptr, 0);
    close(fd);
    if (o.ceilings) {
      std::vector<uint8_t*> scratch{AllocTouched(s.ws, 9)};
      for (uint64_t size : o.sizes) {
        if (!memcpy_gbps.count({"", size})) {
          memcpy_gbps[{"", size}] = MemcpyGbps(scratch[0], s.local, s.ws, size);
        }
        if (OverTcp(transport)) iperf[{transport, size}] = Iperf3Gbps(size);
        std::string test = OverTcp(transport) && o.data_path != "rma" ? "ucp_am_bw" : "ucp_put_bw";
        perftest[{transport, size}] = UcxPerftestGbps(transport, test, size);
        perftest_name[{transport, size}] = test;
      }
      std::free(scratch[0]);
    }
    std::free(s.local);
  }
  // Report.
  nlohmann::json out = nlohmann::json::array();
  if (!o.json) {
    std::printf("%-4s %-5s %6s %5s %5s %8s %9s %9s %9s %9s | %7s %7s %7s | %6s %6s %6s\n", "tls",
                "op", "desc", "batch", "merg", "GB/s", "post50us", "post99us", "cmpl50us",
                "cmpl99us", "memcpy", "iperf3", "perft", "/memcp", "/iperf", "/perft");
  }
  for (const Row& r : rows) {
    double mc = memcpy_gbps.count({"", r.desc_bytes}) ? memcpy_gbps[{"", r.desc_bytes}] : -1;
    double ip = iperf.count({r.transport, r.desc_bytes}) ? iperf[{r.transport, r.desc_bytes}] : -1;
    double pt =
        perftest.count({r.transport, r.desc_bytes}) ? perftest[{r.transport, r.desc_bytes}] : -1;
    auto ratio = [&](double c) { return c > 0 ? r.gbps / c : -1.0; };
    nlohmann::json j = {
        {"transport", r.transport},
        {"op", r.op},
        {"desc_bytes", r.desc_bytes},
        {"descs_per_xfer", r.descs},
        {"descs_after_merge", r.merged},
        {"transfers", r.xfers},
        {"bytes", r.bytes},
        {"gbps", r.gbps},
        {"post_p50_us", r.post_p50_us},
        {"post_p99_us", r.post_p99_us},
        {"completion_p50_us", r.compl_p50_us},
        {"completion_p99_us", r.compl_p99_us},
        // One typical transfer's rate: bytes per transfer / p50 completion.
        {"gbps_at_p50_completion",
         r.compl_p50_us > 0 ? static_cast<double>(r.desc_bytes) * r.descs / r.compl_p50_us / 1e3
                            : 0.0},
        {"validated", r.validated},
        {"working_set_bytes", o.working_set_bytes},
        {"busy_threads", o.busy_threads}};
    if (!r.error.empty()) j["error"] = r.error;
    if (mc > 0) {
      j["ceiling_cold_memcpy_gbps"] = mc;
      j["ratio_vs_cold_memcpy"] = ratio(mc);
    }
    if (ip > 0) {
      j["ceiling_iperf3_gbps"] = ip;
      j["ratio_vs_iperf3"] = ratio(ip);
    }
    if (pt > 0) {
      j["ceiling_ucx_perftest_gbps"] = pt;
      j["ceiling_ucx_perftest_test"] = perftest_name[{r.transport, r.desc_bytes}];
      j["ratio_vs_ucx_perftest"] = ratio(pt);
    }
    out.push_back(j);
    if (!o.json) {
      auto f = [](double v) { return v > 0 ? fmt::format("{:.2f}", v) : std::string("-"); };
      std::printf(
          "%-4s %-5s %6s %5u %5u %8.3f %9.1f %9.1f %9.1f %9.1f | %7s %7s %7s | %6s %6s %6s%s%s\n",
          r.transport.c_str(), r.op.c_str(), Human(r.desc_bytes).c_str(), r.descs, r.merged, r.gbps,
          r.post_p50_us, r.post_p99_us, r.compl_p50_us, r.compl_p99_us, f(mc).c_str(),
          f(ip).c_str(), f(pt).c_str(), f(ratio(mc)).c_str(), f(ratio(ip)).c_str(),
          f(ratio(pt)).c_str(), o.validate ? (" validate=" + r.validated).c_str() : "",
          r.error.empty() ? "" : (" ERROR " + r.error).c_str());
    }
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
  if (!o.plot_path.empty()) {
    Status st = PlotRows(out, o);
    if (!st.ok()) std::fprintf(stderr, "bench xfer: --plot: %s\n", st.ToString().c_str());
  }
  bool failed = std::any_of(rows.begin(), rows.end(), [](const Row& r) {
    return !r.error.empty() || r.validated == "FAILED";
  });
  return failed ? 1 : 0;
}

}  // namespace kvferry::bench
