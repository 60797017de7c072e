// See xfer_bench.h. Layout: helpers, the target role, ceilings, the sweep.
#include "bench/transfer/xfer_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
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

#include "bench/common/cold_memcpy.h"
#include "bench/plot/svg_plot.h"
#include "bench/transfer/xfer_ceilings.h"
#include "kvferry/common/child_process.h"
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

// The other ceilings (iperf3, ucx_perftest) are in xfer_ceilings.cc.

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

// Post one prepared transfer and wait for it; the Post and completion times if asked.
Status RunOne(Session& s, XferHandle h, double* post_us, double* compl_us) {
  auto t0 = Clock::now();
  KVF_RETURN_IF_ERROR(s.agent->Post(h));
  auto t1 = Clock::now();
  KVF_RETURN_IF_ERROR(s.agent->Wait(h, Deadline::AfterMs(60'000)));
  auto t2 = Clock::now();
  if (post_us) *post_us = Seconds(t1 - t0) * 1e6;
  if (compl_us) *compl_us = Seconds(t2 - t0) * 1e6;
  return Status::Ok();
}

// `batch` descriptors of `size` bytes from `offset` on, on both sides, in reversed order on the
// remote side: pairs are never adjacent on both sides, so nothing merges.
TransferRequest UnmergeableRequest(const Session& s, XferOp op, uint64_t offset, uint64_t size,
                                   uint32_t batch) {
  TransferRequest req{.op = op,
                      .peer = s.peer,
                      .local = {},
                      .remote = {},
                      .notification = "",
                      .timeout_ms = 30'000};
  for (uint32_t i = 0; i < batch; ++i) {
    req.local.push_back({s.lr, offset + i * size, size});
    req.remote.push_back({s.rr, offset + (batch - 1 - i) * size, size});
  }
  return req;
}

// Up to 128 transfers of `batch` descriptors of `size` bytes, spread over the working set.
StatusOr<std::vector<XferHandle>> PrepareSpread(Session& s, XferOp op, uint64_t size,
                                                uint32_t batch) {
  const uint64_t per_xfer = size * batch;
  const uint64_t nslots = s.ws / per_xfer;
  const uint64_t nh = std::min<uint64_t>(nslots, 128);
  const uint64_t stride = (nslots / nh) * per_xfer;
  std::vector<XferHandle> hs;
  for (uint64_t j = 0; j < nh; ++j) {
    KVF_ASSIGN_OR_RETURN(
        XferHandle h, s.agent->PrepareTransfer(UnmergeableRequest(s, op, j * stride, size, batch)));
    hs.push_back(h);
  }
  return hs;
}

// Two warm-up transfers, then round-robin over `hs` for the point's time budget (at least 4,
// at most 200000 transfers): the rate and the latency percentiles into `row`. False if a
// warm-up transfer failed (row->error says why; nothing was timed).
bool TimePoint(Session& s, const std::vector<XferHandle>& hs, uint64_t per_xfer,
               const XferBenchOptions& o, Row* row) {
  const uint64_t nh = hs.size();
  for (int w = 0; w < 2; ++w) {
    Status st = RunOne(s, hs[w % nh], nullptr, nullptr);
    if (!st.ok()) {
      row->error = st.ToString();
      return false;
    }
  }
  std::vector<double> post, compl_;
  auto start = Clock::now();
  auto budget = std::chrono::milliseconds(o.point_ms);
  uint64_t it = 0;
  while ((Clock::now() - start < budget || it < 4) && it < 200'000) {
    double p, c;
    Status st = RunOne(s, hs[it % nh], &p, &c);
    if (!st.ok()) {
      row->error = st.ToString();
      break;
    }
    post.push_back(p);
    compl_.push_back(c);
    ++it;
  }
  double secs = Seconds(Clock::now() - start);
  row->xfers = it;
  row->bytes = it * per_xfer;
  row->gbps = static_cast<double>(row->bytes) / secs / 1e9;
  row->post_p50_us = Pct(post, 0.5);
  row->post_p99_us = Pct(post, 0.99);
  row->compl_p50_us = Pct(compl_, 0.5);
  row->compl_p99_us = Pct(compl_, 0.99);
  return true;
}

// WRITEs a seeded pattern to the start of the remote buffer, wipes the local copy, READs it
// back and compares: "ok" or "FAILED".
std::string ValidatePoint(Session& s, uint64_t size, uint32_t batch) {
  const uint64_t per_xfer = size * batch;
  uint64_t seed = size * 31 + batch;
  std::vector<uint8_t> expect(per_xfer);
  for (uint64_t i = 0; i < per_xfer; ++i) expect[i] = static_cast<uint8_t>((i * 13 + seed) >> 2);
  TransferRequest w = UnmergeableRequest(s, XferOp::kWrite, 0, size, batch);
  std::memcpy(s.local, expect.data(), per_xfer);
  TransferRequest r = w;
  r.op = XferOp::kRead;
  auto hw = s.agent->PrepareTransfer(w);
  auto hr = s.agent->PrepareTransfer(r);
  bool ok = hw.ok() && hr.ok() && RunOne(s, *hw, nullptr, nullptr).ok();
  std::memset(s.local, 0, per_xfer);
  ok = ok && RunOne(s, *hr, nullptr, nullptr).ok() &&
       std::memcmp(s.local, expect.data(), per_xfer) == 0;
  if (hw.ok()) s.agent->Release(*hw).IgnoreError();
  if (hr.ok()) s.agent->Release(*hr).IgnoreError();
  return ok ? "ok" : "FAILED";
}

Row RunPoint(Session& s, const std::string& transport, XferOp op, uint64_t size, uint32_t batch,
             const XferBenchOptions& o) {
  Row row{transport, op == XferOp::kRead ? "read" : "write", size, batch};
  StatusOr<std::vector<XferHandle>> hs = PrepareSpread(s, op, size, batch);
  if (!hs.ok()) {
    row.error = hs.status().ToString();
    return row;
  }
  row.merged = s.agent->GetXferInfo((*hs)[0])->num_descriptors_merged;
  if (!TimePoint(s, *hs, size * batch, o, &row)) return row;  // warm-up failed: nothing timed
  if (o.validate && row.error.empty()) row.validated = ValidatePoint(s, size, batch);
  for (XferHandle h : *hs) s.agent->Release(h).IgnoreError();
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

// ---- one transport: the target, the session, the points, the ceilings ----------------------

// The control channel to the target of one transport, and the target's process when this run
// spawned it.
struct TargetLink {
  int fd = -1;
  std::optional<ChildProcess> child;
};

// The target of `transport`: the remote one at --connect, or this binary re-run with --role
// target in a child, over a socketpair. fd < 0 if it cannot be reached.
TargetLink StartTarget(const XferBenchOptions& o, const std::string& transport, uint64_t ws) {
  TargetLink link;
  if (!o.connect.empty()) {
    link.fd = ConnectTo(o.connect);
    return link;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return link;
  StatusOr<ChildProcess> child = ChildProcess::Fork([&] {
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
    return 127;
  });
  close(sv[1]);
  if (!child.ok()) {
    close(sv[0]);
    return link;
  }
  link.child = std::move(*child);
  link.fd = sv[0];
  return link;
}

// The initiator's side of one transport: its agent, a local buffer of the working set (the
// smaller of ours and the target's) and the peer loaded from the target's metadata `*md`.
// False (after saying why) if the target did not start or cannot be loaded.
bool OpenSession(const XferBenchOptions& o, const std::string& transport, int fd, Session* s,
                 std::string* md) {
  s->ws = o.working_set_bytes;
  auto agent = Agent::Create(MakeAgentOptions("bench-initiator", transport, o.data_path));
  auto metadata = RecvFrame(fd, Deadline::AfterMs(60'000));
  auto info = RecvFrame(fd, Deadline::AfterMs(10'000));
  if (!agent.ok() || !metadata || !info) {
    std::fprintf(stderr, "bench xfer: target for %s did not start\n", transport.c_str());
    return false;
  }
  *md = *metadata;
  s->agent = std::move(*agent);
  uint64_t remote_ws = 0;
  uint32_t rid = 0;
  std::istringstream(*info) >> rid >> remote_ws;
  s->rr = RegionHandle{rid};
  s->ws = std::min(o.working_set_bytes, remote_ws);
  s->local = AllocTouched(s->ws, 1);
  s->lr = *s->agent->RegisterMemory(s->local, s->ws, MemoryKind::kHost);
  auto peer = s->agent->LoadRemoteMetadata(*md);
  if (!peer.ok()) {
    std::fprintf(stderr, "bench xfer: %s\n", peer.status().ToString().c_str());
    return false;
  }
  s->peer = *peer;
  return true;
}

// Every (op, size, batch) point of one transport that fits the working set, in order.
void SweepPoints(const XferBenchOptions& o, const std::string& transport, const std::string& md,
                 Session& s, std::vector<Row>* rows) {
  std::optional<BusyLoops> busy;
  if (o.busy_threads > 0) busy.emplace(o.busy_threads);
  for (const std::string& op : o.ops) {
    for (uint64_t size : o.sizes) {
      for (uint32_t batch : o.batches) {
        if (size * batch > s.ws) continue;
        Row r =
            RunPoint(s, transport, op == "read" ? XferOp::kRead : XferOp::kWrite, size, batch, o);
        if (!r.error.empty()) {  // a failed transfer closes the connection: reconnect
          auto again = s.agent->LoadRemoteMetadata(md);
          if (again.ok()) s.peer = *again;
        }
        if (!o.json) {
          std::fprintf(stderr, "  %-3s %-5s %6s x %-5u %7.3f GB/s %s\n", transport.c_str(),
                       r.op.c_str(), Human(size).c_str(), batch, r.gbps, r.error.c_str());
        }
        rows->push_back(r);
      }
    }
  }
}

// The ceilings measured in the run, by (transport, descriptor bytes); cold memcpy by ("", bytes).
struct Ceilings {
  std::map<std::pair<std::string, uint64_t>, double> iperf, perftest, memcpy_gbps;
  std::map<std::pair<std::string, uint64_t>, std::string> perftest_name;

  // A row's three ceilings in GB/s; < 0 where not measured.
  struct OfRow {
    double cold_memcpy = -1, iperf = -1, perftest = -1;
  };
  OfRow For(const Row& r) const {
    auto get = [](const std::map<std::pair<std::string, uint64_t>, double>& m,
                  const std::string& transport, uint64_t size) {
      auto it = m.find({transport, size});
      return it == m.end() ? -1.0 : it->second;
    };
    return {get(memcpy_gbps, "", r.desc_bytes), get(iperf, r.transport, r.desc_bytes),
            get(perftest, r.transport, r.desc_bytes)};
  }
};

// Our rate as a fraction of a ceiling; -1 where the ceiling was not measured.
double Ratio(double gbps, double ceiling) { return ceiling > 0 ? gbps / ceiling : -1.0; }

// The idle machine's ceilings for one transport, after its points (the target is gone).
void MeasureCeilings(const XferBenchOptions& o, const std::string& transport, const Session& s,
                     Ceilings* c) {
  uint8_t* scratch = AllocTouched(s.ws, 9);
  for (uint64_t size : o.sizes) {
    if (!c->memcpy_gbps.count({"", size})) {
      c->memcpy_gbps[{"", size}] = ColdMemcpyGbps(scratch, s.local, s.ws, size);
    }
    if (OverTcp(transport)) c->iperf[{transport, size}] = Iperf3Gbps(size);
    std::string test = OverTcp(transport) && o.data_path != "rma" ? "ucp_am_bw" : "ucp_put_bw";
    c->perftest[{transport, size}] = UcxPerftestGbps(OverTcp(transport), test, size);
    c->perftest_name[{transport, size}] = test;
  }
  std::free(scratch);
}

// One transport from start to end: target, session, points, then (target gone) its ceilings.
// False if the target could not be reached or did not start.
bool RunTransport(const XferBenchOptions& o, const std::string& transport, std::vector<Row>* rows,
                  Ceilings* ceilings) {
  TargetLink target = StartTarget(o, transport, o.working_set_bytes);
  if (target.fd < 0) {
    std::fprintf(stderr, "bench xfer: cannot reach the target\n");
    return false;
  }
  Session s;
  std::string md;
  if (!OpenSession(o, transport, target.fd, &s, &md)) return false;
  SweepPoints(o, transport, md, s, rows);
  SendFrame(target.fd, "QUIT");
  s.agent.reset();
  if (target.child) target.child->Wait();
  close(target.fd);
  if (o.ceilings) MeasureCeilings(o, transport, s, ceilings);
  std::free(s.local);
  return true;
}

// ---- the report -----------------------------------------------------------------------------

nlohmann::json RowJson(const Row& r, const Ceilings& c, const XferBenchOptions& o) {
  const Ceilings::OfRow ceiling = c.For(r);
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
  if (ceiling.cold_memcpy > 0) {
    j["ceiling_cold_memcpy_gbps"] = ceiling.cold_memcpy;
    j["ratio_vs_cold_memcpy"] = Ratio(r.gbps, ceiling.cold_memcpy);
  }
  if (ceiling.iperf > 0) {
    j["ceiling_iperf3_gbps"] = ceiling.iperf;
    j["ratio_vs_iperf3"] = Ratio(r.gbps, ceiling.iperf);
  }
  if (ceiling.perftest > 0) {
    j["ceiling_ucx_perftest_gbps"] = ceiling.perftest;
    j["ceiling_ucx_perftest_test"] = c.perftest_name.at({r.transport, r.desc_bytes});
    j["ratio_vs_ucx_perftest"] = Ratio(r.gbps, ceiling.perftest);
  }
  return j;
}

void PrintTableHeader() {
  std::printf("%-4s %-5s %6s %5s %5s %8s %9s %9s %9s %9s | %7s %7s %7s | %6s %6s %6s\n", "tls",
              "op", "desc", "batch", "merg", "GB/s", "post50us", "post99us", "cmpl50us", "cmpl99us",
              "memcpy", "iperf3", "perft", "/memcp", "/iperf", "/perft");
}

void PrintTableRow(const Row& r, const Ceilings& c, const XferBenchOptions& o) {
  const Ceilings::OfRow ceiling = c.For(r);
  const double mc = ceiling.cold_memcpy, ip = ceiling.iperf, pt = ceiling.perftest;
  auto ratio = [&r](double v) { return Ratio(r.gbps, v); };
  auto f = [](double v) { return v > 0 ? fmt::format("{:.2f}", v) : std::string("-"); };
  std::printf(
      "%-4s %-5s %6s %5u %5u %8.3f %9.1f %9.1f %9.1f %9.1f | %7s %7s %7s | %6s %6s %6s%s%s\n",
      r.transport.c_str(), r.op.c_str(), Human(r.desc_bytes).c_str(), r.descs, r.merged, r.gbps,
      r.post_p50_us, r.post_p99_us, r.compl_p50_us, r.compl_p99_us, f(mc).c_str(), f(ip).c_str(),
      f(pt).c_str(), f(ratio(mc)).c_str(), f(ratio(ip)).c_str(), f(ratio(pt)).c_str(),
      o.validate ? (" validate=" + r.validated).c_str() : "",
      r.error.empty() ? "" : (" ERROR " + r.error).c_str());
}

// The table (or --json), the plot; the exit code: 1 if a point failed or did not validate.
int Report(const std::vector<Row>& rows, const Ceilings& ceilings, const XferBenchOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  if (!o.json) PrintTableHeader();
  for (const Row& r : rows) {
    out.push_back(RowJson(r, ceilings, o));
    if (!o.json) PrintTableRow(r, ceilings, o);
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

}  // namespace

int RunXferBench(const XferBenchOptions& o) {
  if (o.role == "target") return RunTarget(o);
  std::vector<Row> rows;
  Ceilings ceilings;
  for (const std::string& transport : o.transports) {
    if (!RunTransport(o, transport, &rows, &ceilings)) return 1;
  }
  return Report(rows, ceilings, o);
}

}  // namespace kvferry::bench
