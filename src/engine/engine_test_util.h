// Helpers shared by the engine's tests (test-only).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvferry/engine/engine.h"

namespace kvferry::engine::testing_util {

// Greedy sampling of `n` tokens, EOS ignored: every run has the same length.
inline SamplingParams Greedy(int n) {
  SamplingParams p;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

// `n` floats uniform in [lo, hi), from a Mersenne twister seeded with `seed`.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason reason = FinishReason::kNone;
  Status error;
  std::optional<connector::KvTransferParams> kv_transfer_params;
  int32_t num_cached_tokens = 0;
  int finished_count = 0;
};

// Adds one Step()'s outputs to `all`.
inline void Collect(std::vector<RequestOutput> outputs, std::map<std::string, Completion>* all) {
  for (RequestOutput& out : outputs) {
    Completion& c = (*all)[out.request_id];
    c.tokens.insert(c.tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
    if (out.finished) {
      ++c.finished_count;
      c.reason = out.finish_reason;
      c.error = out.error;
      c.kv_transfer_params = out.kv_transfer_params;
      c.num_cached_tokens = out.num_cached_tokens;
    }
  }
}

// Steps the engine until it has no work (bounded), collecting every request's outputs (after
// those already in `all`). With expect_drain false (P holding blocks for a reader), stops after
// max_steps quietly.
inline std::map<std::string, Completion> RunToEnd(Engine& engine, int max_steps = 100000,
                                                  bool expect_drain = true,
                                                  std::map<std::string, Completion> all = {}) {
  for (int i = 0; i < max_steps && engine.HasWork(); ++i) Collect(engine.Step(), &all);
  if (expect_drain) {
    EXPECT_FALSE(engine.HasWork()) << "engine did not drain";
  }
  return all;
}

// The ids of `text` with the tokenizer's special tokens (a test failure when it cannot encode).
inline std::vector<int32_t> Encode(const tokenizer::Tokenizer& tok, std::string_view text) {
  auto ids = tok.Encode(text, /*add_special_tokens=*/true);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// `bytes` bytes of varied text (numbered sentences), for prompts longer than a kernel block of
// 128: the same text in every test that needs one.
inline std::string LongText(size_t bytes) {
  static const char* const kWords[] = {"prefill", "decode", "block", "ferry", "cache",
                                       "token",   "layer",  "head",  "proxy", "kernel"};
  std::string text;
  for (int i = 0; text.size() < bytes; ++i) {
    text += "Step " + std::to_string(i) + ": the " + kWords[i % 10] + " meets the " +
            kWords[(i * 7 + 3) % 10] + ". ";
  }
  text.resize(bytes);
  return text;
}

// Bitwise equality of tokens and logprobs.
inline void ExpectSameCompletion(const Completion& a, const Completion& b,
                                 const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * 4)) << what;
}

// The pool is back to its starting state: nothing used or held.
inline void ExpectPoolClean(const Engine& engine) {
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.num_blocks_used, 0);
  EXPECT_EQ(s.num_blocks_held, 0);
  EXPECT_EQ(s.num_blocks_free + s.num_blocks_cached, s.num_blocks_total);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  EXPECT_EQ(s.num_waiting_for_remote_kv, 0);
}

}  // namespace kvferry::engine::testing_util
