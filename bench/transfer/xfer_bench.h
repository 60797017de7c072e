// `kvferry bench xfer`: a nixlbench-like benchmark of the transfer layer, with its ceilings.
//
// An initiator process sweeps descriptor size x descriptors per transfer x READ/WRITE x
// transport against a target process (spawned on this host by default, or reached with
// --connect HOST:PORT when the target runs elsewhere with --role target --listen PORT). Each
// point moves transfers over a working set larger than the caches and reports GB/s (1e9 B/s),
// p50/p99 Post latency and p50/p99 completion latency (Post -> done). In the same run it
// measures the ceilings: cold memcpy of the same descriptors over the same working set, the
// kernel's loopback TCP stream (iperf3), and ucx_perftest with the same transport and message
// size (cache-hot: it reuses one buffer), and prints our figure as a ratio of each.
//
// Thread-safety: single-threaded; runs in the CLI's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvferry::bench {

struct XferBenchOptions {
  std::vector<uint64_t> sizes;          // descriptor bytes
  std::vector<uint32_t> batches;        // descriptors per transfer
  std::vector<std::string> ops;         // "read", "write"
  std::vector<std::string> transports;  // "tcp", "shm" (UCX), "socket" (socket backend)
  uint64_t working_set_bytes = 256ull << 20;
  int point_ms = 400;  // time budget of one point (after warm-up)
  bool validate = false;
  bool json = false;
  bool ceilings = true;
  std::string plot_path;  // non-empty: an SVG of GB/s against descriptor size, with ceilings
  // Contention: this many threads spin on the initiator's host while the points are measured
  // (not while the ceilings are: those stay the idle machine's), as a serving host is busy.
  int busy_threads = 0;
  std::string data_path = "auto";  // auto | rma | am
  // Roles and placement.
  std::string role = "initiator";  // initiator | target
  int ctl_fd = -1;                 // target spawned locally: control socket
  std::string listen;              // target on another host: [HOST:]PORT to accept on
  std::string connect;             // initiator: HOST:PORT of a remote target
  std::string transport;           // target: its transport
};

// Runs the benchmark (or the target role); returns the process exit code.
int RunXferBench(const XferBenchOptions& options);

}  // namespace kvferry::bench
