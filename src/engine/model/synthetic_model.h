// Random weights for a real model shape and tokenizer (what `kvferry synth-model` writes): the
// generated layers of weights.h, with the vocabulary side set up as in a real checkpoint.
//
// Logit spread. GenerateWeights draws the lm_head with std kLogitStd / sqrt(hidden), so each
// logit w_t . h (h the final-normed hidden state, |h| ~ sqrt(hidden)) has a std of about
// kLogitStd = 3 nats at any width: over a 32k-150k vocabulary the top token then takes a few
// percent to a few tens of percent of the probability, as a real model's often does, instead
// of the near-uniform distribution of small logits. The typical top-2 margin is ~0.5 nat
// (measured: docs/models.md), four orders of magnitude above the f32 rounding differences
// between two implementations, which is what lets tests compare greedy tokens with llama.cpp's
// for equality. A larger scale would not make ties rarer: margins and rounding differences
// both grow with it.
//
// Tied embeddings. The shared matrix has rows of norm ~1 (std 1 / sqrt(hidden), small beside
// the layers' outputs as a trained embedding is) and the final norm's weights are scaled by
// kLogitStd to give the logits their spread. At GenerateWeights' std of 1, rows of norm
// sqrt(hidden) dominate the residual stream: the final hidden state points at the input
// token's own row and the model repeats its input (98% of greedy tokens in
// synthetic_model_test, against 72% with the scaling and 26% for the same model untied; top-2
// margins of ~20 nats, so the layers hardly matter and a test comparing tokens would not
// notice them computed wrong).

// Padding. Rows from the tokenizer's vocabulary size on (a --vocab-size above it, as Qwen's
// 151936 rows for 151669 tokens) are zero in the lm_head (and so in a tied embedding): their
// logit is 0, far below the top, so a model does not predict them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "engine/weights.h"

namespace kvferry::engine {

inline constexpr float kSyntheticLogitStd = 3.0f;

// GenerateWeights(config) shaped as above. InvalidArgument when tokenizer_vocab exceeds the
// config's vocabulary (or is not positive), or for a config GenerateWeights refuses.
StatusOr<ModelWeights> SyntheticWeights(const ModelConfig& config, int32_t tokenizer_vocab);

}  // namespace kvferry::engine
