// The ceilings of `kvferry bench xfer` that other programs measure: the kernel's loopback TCP
// stream (iperf3) and UCX's own benchmark (ucx_perftest), each run as a server process and a
// client on this host, with the message size of the point they bound. (The cold-memcpy
// ceiling is bench/common/cold_memcpy.h.)
//
// Thread-safety: single-threaded; each call runs and reaps its own processes.
#pragma once

#include <cstdint>
#include <string>

namespace kvferry::bench {

// iperf3, one stream over loopback with `len`-byte writes (iperf3 caps writes at 1 MiB).
// GB/s (1e9 B/s), or < 0 if unavailable.
double Iperf3Gbps(uint64_t len);

// ucx_perftest `test` (ucp_am_bw, ucp_put_bw) with one message of `len` bytes per iteration,
// over TCP or shared memory. GB/s, or < 0 if unavailable.
double UcxPerftestGbps(bool over_tcp, const std::string& test, uint64_t len);

}  // namespace kvferry::bench
