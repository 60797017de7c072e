#include "engine/model/synthetic_model.h"

#include <algorithm>
#include <cmath>

namespace kvferry::engine {
namespace {

// The generated F32 buffer behind `m`: GenerateWeights' buffers belong to the ModelWeights it
// returned and nothing else has seen them yet, so they are shaped in place (a copy would double
// the memory of the largest tensor).
float* Mutable(const WeightMatrix& m) {
  return const_cast<float*>(reinterpret_cast<const float*>(m.data));
}

}  // namespace

StatusOr<ModelWeights> SyntheticWeights(const ModelConfig& config, int32_t tokenizer_vocab) {
  if (tokenizer_vocab <= 0 || tokenizer_vocab > config.vocab_size) {
    return InvalidArgumentError("the tokenizer has " + std::to_string(tokenizer_vocab) +
                                " tokens, the model's vocabulary " +
                                std::to_string(config.vocab_size));
  }
  KVF_ASSIGN_OR_RETURN(ModelWeights w, GenerateWeights(config));
  const int64_t d = config.hidden_dim;
  float* head = Mutable(w.lm_head);
  if (config.tie_embeddings) {
    // GenerateWeights draws the embedding with std 1: rows of norm 1 instead, and the logits'
    // spread from the final norm.
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int64_t i = 0; i < int64_t{config.vocab_size} * d; ++i) head[i] *= scale;
    for (float& g : w.final_norm) g *= kSyntheticLogitStd;
  }
  std::fill(head + tokenizer_vocab * d, head + config.vocab_size * d, 0.0f);
  return w;
}

}  // namespace kvferry::engine
