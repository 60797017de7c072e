// The mixture-of-experts router (internal): which experts a token runs and with what weights,
// from its router logits (model_config.h, MoeShape, has the rule).
//
// A pure function of one token's logits: no capacity limit and nothing shared between the
// tokens of a batch, so a token's experts and weights never depend on its batch mates. Float
// arithmetic in one fixed order (softmax: the max, then exp(l - max) summed in expert order).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "kvferry/engine/model_config.h"

namespace kvferry::engine {

// logits: [num_experts]; bias: the correction bias [num_experts] with m.correction_bias, else
// empty. Writes m.experts_per_token expert ids in ascending order to `experts` and each one's
// weight to `weights`.
void RouteToken(const MoeShape& m, const float* logits, std::span<const float> bias,
                int32_t* experts, float* weights);

}  // namespace kvferry::engine
