// Sampler (internal): picks a request's next token from one row of logits.
//
// Determinism: a function of (logits row, params, seed, token_index) only. The random number
// for the i-th generated token is a counter-based hash of (seed, i), so it does not depend on
// the batch, the step or preemption. Candidates are ordered by (logit desc, id asc); sums run in
// that order.
//   greedy (temperature 0): argmax, lowest id on ties.
//   else: z = logits / T; keep top_k (if > 0); keep the smallest prefix whose probability mass
//   reaches top_p; draw from the renormalized prefix.
// Reported logprobs are of the model's distribution (log_softmax of the raw logits), as vLLM
// reports them by default.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "kvferry/engine/request_output.h"
#include "kvferry/engine/sampling_params.h"

namespace kvferry::engine {

struct SampleResult {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, best first
};

SampleResult Sample(const float* logits, int32_t vocab_size, const SamplingParams& params,
                    uint64_t seed, int64_t token_index);

// Uniform in [0, 1) from (seed, index): the sampler's random source.
double SampleUniform(uint64_t seed, int64_t index);

}  // namespace kvferry::engine
