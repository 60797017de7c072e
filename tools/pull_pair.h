// One P/D pull pair for the pull benchmarks (`kvferry bench tp-pull`, `bench mla-pull`): a P
// engine and a D engine with real FerryConnectors in this process hand the same prompt over
// `reps` times (one untimed warm-up first); each pull's time (post to checked, from D's
// connector) and the last load report are returned.
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
};

struct PairResult {
  int p_tp = 1, d_tp = 1;
  std::vector<double> pull_us;
  connector::LoadReport last;
  double Median() const;
};

// P at TP p_tp, D at TP d_tp, both with `o`'s model and geometry.
StatusOr<PairResult> BenchPair(const PullOptions& o, int p_tp, int d_tp);

}  // namespace kvferry::tools
