#include "kvferry/engine/sampling_params.h"

#include <cmath>
#include <string>

namespace kvferry::engine {

Status SamplingParams::Validate() const {
  if (max_tokens < 1) {
    return InvalidArgumentError("max_tokens must be >= 1 (got " + std::to_string(max_tokens) + ")");
  }
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgumentError("temperature must be a finite number >= 0");
  }
  if (top_k < 0) return InvalidArgumentError("top_k must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgumentError("top_p must be in (0, 1]");
  if (top_logprobs < 0 || top_logprobs > 20) {
    return InvalidArgumentError("top_logprobs must be in [0, 20]");
  }
  return Status::Ok();
}

}  // namespace kvferry::engine
