#include "kvferry/engine/tokenizer.h"

namespace kvferry::engine {

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (add_bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> token_ids) const {
  std::string out;
  out.reserve(token_ids.size());
  for (int32_t id : token_ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

std::string Tokenizer::TokenText(int32_t token_id) const {
  if (token_id >= 0 && token_id < 256) return std::string(1, static_cast<char>(token_id));
  return std::string();
}

}  // namespace kvferry::engine
