#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvferry::engine {

namespace {
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

double SampleUniform(uint64_t seed, int64_t index) {
  const uint64_t h = Mix(Mix(seed) ^ Mix(static_cast<uint64_t>(index) + 0x632be59bd9b4e019ull));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

SampleResult Sample(const float* logits, int32_t vocab_size, const SamplingParams& params,
                    uint64_t seed, int64_t token_index) {
  // log_softmax of the raw logits (max is order-free; the sum runs in id order).
  float mx = logits[0];
  int32_t argmax = 0;
  for (int32_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > mx) {
      mx = logits[i];
      argmax = i;
    }
  }
  double sum = 0.0;
  for (int32_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = static_cast<double>(mx) + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_z); };

  SampleResult result;
  // order[0, n) holds the n best ids by (logit desc, id asc), a total order, so a partial sort
  // gives exactly the prefix a full stable sort by logit would: top_k and top_logprobs sort only
  // what they keep (a full sort of a 152k vocabulary costs milliseconds a token).
  std::vector<int32_t> order;
  int32_t sorted = 0;
  auto sort_order = [&](int32_t n) {
    if (n <= sorted) return;
    order.resize(vocab_size);
    std::iota(order.begin(), order.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    // For most of the vocabulary a heap-based partial sort (and introsort) measured slower than
    // a merge sort of everything: the stable sort by logit alone, ties kept in id order.
    if (n > vocab_size / 16) {
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    } else {
      std::partial_sort(order.begin(), order.begin() + n, order.end(), better);
    }
    sorted = n;
  };

  if (params.temperature == 0.0f) {
    result.token_id = argmax;
  } else {
    int32_t keep = vocab_size;
    if (params.top_k > 0) keep = std::min(keep, params.top_k);
    sort_order(keep);
    const double inv_t = 1.0 / static_cast<double>(params.temperature);
    const double zmax = static_cast<double>(logits[order[0]]) * inv_t;
    std::vector<double> p(keep);
    double total = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
      p[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - zmax);
      total += p[i];
    }
    if (params.top_p < 1.0f) {
      const double target = static_cast<double>(params.top_p) * total;
      double cum = 0.0;
      int32_t n = 0;
      while (n < keep) {
        cum += p[n++];
        if (cum >= target) break;
      }
      keep = n;
      total = cum;
    }
    const double u = SampleUniform(seed, token_index) * total;
    double cum = 0.0;
    result.token_id = order[keep - 1];
    for (int32_t i = 0; i < keep; ++i) {
      cum += p[i];
      if (u < cum) {
        result.token_id = order[i];
        break;
      }
    }
  }
  result.logprob = logprob(result.token_id);
  if (params.top_logprobs > 0) {
    const int32_t n = std::min(params.top_logprobs, vocab_size);
    sort_order(n);
    for (int32_t i = 0; i < n; ++i) result.top_logprobs.push_back({order[i], logprob(order[i])});
  }
  return result;
}

}  // namespace kvferry::engine
