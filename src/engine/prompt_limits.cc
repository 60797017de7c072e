#include "kvferry/engine/prompt_limits.h"

#include <algorithm>
#include <string>

namespace kvferry::engine {

Status CheckPrompt(std::span<const int32_t> prompt_token_ids, int32_t vocab_size,
                   int32_t max_model_len) {
  for (int32_t t : prompt_token_ids) {
    if (t < 0 || t >= vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(t) + " is out of vocabulary (size " +
                                  std::to_string(vocab_size) + ")");
    }
  }
  const int64_t n = static_cast<int64_t>(prompt_token_ids.size());
  if (n >= max_model_len) {
    return InvalidArgumentError("This model's maximum context length is " +
                                std::to_string(max_model_len) +
                                " tokens. However, your prompt has " + std::to_string(n) +
                                " tokens. Please reduce the length of the prompt.");
  }
  return Status::Ok();
}

Status CheckRequestLength(int64_t num_prompt_tokens, int64_t max_tokens, int32_t max_model_len) {
  if (num_prompt_tokens + max_tokens <= max_model_len) return Status::Ok();
  return InvalidArgumentError(
      "This model's maximum context length is " + std::to_string(max_model_len) +
      " tokens. However, you requested " + std::to_string(num_prompt_tokens + max_tokens) +
      " tokens (" + std::to_string(num_prompt_tokens) + " in the prompt, " +
      std::to_string(max_tokens) +
      " for the completion). Please reduce the length of the prompt or the completion.");
}

size_t MaxPromptBytes(const tokenizer::Tokenizer& tok, int32_t max_model_len) {
  size_t longest = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    longest = std::max(longest, tok.TokenBytes(id).size());
  }
  return 4 * longest * static_cast<size_t>(std::max(max_model_len, 0));
}

Status CheckPromptBytes(size_t bytes, size_t max_bytes, int32_t max_model_len) {
  if (bytes <= max_bytes) return Status::Ok();
  return InvalidArgumentError("This model's maximum context length is " +
                              std::to_string(max_model_len) + " tokens. However, your prompt has " +
                              std::to_string(bytes) + " bytes, more than " +
                              std::to_string(max_bytes) +
                              " bytes can hold in that many tokens. Please reduce the length of "
                              "the prompt.");
}

}  // namespace kvferry::engine
