#include "kvferry/tokenizer/stream_decoder.h"

#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::Add(int32_t id) {
  // Decode leaves these ids out, so that their neighbours meet; so does the window.
  if (id < 0 || id >= tokenizer_->vocab_size()) return std::string();
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return std::string();
  window_.push_back(id);
  const std::span<const int32_t> all(window_);
  const std::string context =
      tokenizer_->DecodeBytesAt(all.first(read_), skip_special_tokens_, at_start_);
  const std::string text = tokenizer_->DecodeBytesAt(all, skip_special_tokens_, at_start_);
  if (text.size() <= context.size() || IncompleteTailLength(text) > 0) return std::string();
  // Decoding is prefix-stable (decoders.h), so `text` extends `context`; the guard keeps a
  // broken invariant from cutting a character.
  size_t common = 0;
  while (common < context.size() && context[common] == text[common]) ++common;
  std::string out = ToValidUtf8(std::string_view(text).substr(common));
  // What was output becomes the context of the next window.
  at_start_ = at_start_ && read_ == 0;
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = window_.size();
  return out;
}

std::string StreamDecoder::Finish() {
  const std::span<const int32_t> all(window_);
  const std::string context =
      tokenizer_->DecodeBytesAt(all.first(read_), skip_special_tokens_, at_start_);
  const std::string text = tokenizer_->DecodeBytesAt(all, skip_special_tokens_, at_start_);
  window_.clear();
  read_ = 0;
  if (text.size() <= context.size()) return std::string();
  return ToValidUtf8(std::string_view(text).substr(context.size()));
}

}  // namespace kvferry::tokenizer
