// One P/D pull pair for the pull benchmarks (`kvferry bench tp-pull`, `bench mla-pull`): a P
// engine and a D engine with real FerryConnectors in this process hand the same prompt over
// `reps` times (one untimed warm-up first); each pull's time (post to checked, from D's
// connector), the last load report and a cold memcpy of the same bytes are returned. With
// `two_process`, P runs in a forked child (pull_pair_child.h) and D in this process.
//
// Called by: the bench commands of tools/ (the CLI thread).
// Thread-safety: runs both engines on the calling thread.
#pragma once

#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"

namespace kvferry::tools {

struct PullOptions {
  std::string model = "tiny-kv4";
  int prompt_len = 2048;
  int reps = 5;
  int block_size = 16;
  std::string attention_backend = "flash";
  std::string layout = "HND";
  std::string backend = "ucx";
  bool host_buffer = false;
  bool heap_cache = false;   // kv_connector_extra_config cache_in_agent_memory: false
  bool two_process = false;  // P in a forked child process, as between two serving instances
};

struct PairResult {
  int p_tp = 1, d_tp = 1;
  std::vector<double> pull_us;
  connector::LoadReport last;
  // The ceiling, measured right after the pulls: one thread's memcpy of the last pull's bytes,
  // in as many equal pieces as it had descriptors, from and to memory no cache holds (a
  // working set of 256 MiB or more per side, a fresh part each time); the median over `reps`
  // (bench/common/cold_memcpy.h, ColdMemcpyMedianUs).
  double cold_memcpy_us = 0;
  double Median() const;
};

// P at TP p_tp, D at TP d_tp, both with `o`'s model and geometry.
StatusOr<PairResult> BenchPair(const PullOptions& o, int p_tp, int d_tp);

}  // namespace kvferry::tools
