// SamplingParams: how one request chooses its tokens, and when it stops.
//
// Determinism: the random draw for the i-th generated token of a request depends only on
// (seed, i) — a counter-based generator — never on the batch, the step, or preemption. A
// request with a seed therefore produces the same tokens in any batch, on any instance
// (colocated, or decode after a remote prefill). Without a seed, the engine assigns one from its
// own counter (EngineConfig::seed), so unseeded sampling is reproducible per engine run only.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::engine {

struct SamplingParams {
  int32_t max_tokens = 16;   // >= 1: generated tokens before finishing with "length"
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties); > 0: sample
  int32_t top_k = 0;         // 0: off; else keep the k most likely tokens
  float top_p = 1.0f;        // (0, 1]: keep the smallest set whose mass reaches top_p
  std::optional<uint64_t> seed;
  int32_t top_logprobs = 0;             // >= 0: alternatives reported per generated token (max 20)
  bool ignore_eos = false;              // true: do not stop on the model's eos token
  std::vector<int32_t> stop_token_ids;  // finishing with "stop" when generated

  // InvalidArgument naming the field (max_tokens < 1, temperature < 0 or not finite,
  // top_k < 0, top_p outside (0, 1], top_logprobs outside [0, 20]).
  Status Validate() const;
};

}  // namespace kvferry::engine
