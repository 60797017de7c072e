#include "server/output_assembler.h"

#include <algorithm>

namespace kvferry::server {

OutputAssembler::OutputAssembler(const tokenizer::Tokenizer* tokenizer, bool logprobs,
                                 std::vector<std::string> stop)
    : tokenizer_(tokenizer),
      decoder_(tokenizer, /*skip_special_tokens=*/true),
      logprobs_(logprobs),
      stop_(std::move(stop)) {
  for (const std::string& s : stop_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

ChoiceOutput OutputAssembler::Add(const engine::RequestOutput& output) {
  ChoiceOutput delta;
  if (finished_) return delta;
  delta.text_offset = static_cast<int32_t>(sent_bytes_);
  for (size_t i = 0; i < output.new_token_ids.size(); ++i) {
    const int32_t id = output.new_token_ids[i];
    ++num_generated_tokens_;
    delta.token_ids.push_back(id);
    generated_ += decoder_.Add(id);
    if (logprobs_) {
      TokenLogprobInfo info;
      info.token_id = id;
      info.text = tokenizer_->TokenText(id);
      info.logprob = i < output.new_logprobs.size() ? output.new_logprobs[i] : 0.0f;
      if (i < output.top_logprobs.size()) {
        for (const engine::TokenLogprob& alt : output.top_logprobs[i]) {
          info.top.emplace_back(tokenizer_->TokenText(alt.token_id), alt.logprob);
        }
      }
      delta.logprobs.push_back(std::move(info));
    }
  }

  bool finish_now = output.finished;
  if (output.finished) generated_ += decoder_.Finish();
  if (output.finished) {
    delta.finish_reason = std::string(engine::FinishReasonName(output.finish_reason));
  }
  // Stop strings: search the text not sent yet (plus an overlap with what was sent).
  if (!stop_.empty()) {
    const size_t search_from = sent_bytes_ >= max_stop_len_ ? sent_bytes_ - max_stop_len_ + 1 : 0;
    size_t best = std::string::npos;
    for (const std::string& s : stop_) {
      const size_t pos = generated_.find(s, search_from);
      if (pos != std::string::npos && pos + s.size() > sent_bytes_) best = std::min(best, pos);
    }
    if (best != std::string::npos) {
      generated_.resize(std::max(best, sent_bytes_));
      finish_now = true;
      stopped_by_string_ = true;
      delta.finish_reason = "stop";
    }
  }

  // Text that may be sent: everything when finishing; else hold back a possible stop-string
  // prefix and an incomplete UTF-8 sequence.
  size_t sendable = generated_.size();
  if (!finish_now && max_stop_len_ > 1) {
    sendable = generated_.size() >= max_stop_len_ - 1 ? generated_.size() - (max_stop_len_ - 1) : 0;
    sendable = std::max(sendable, sent_bytes_);
  }
  pending_ = generated_.substr(sent_bytes_, sendable - sent_bytes_);
  if (finish_now) {
    delta.text = std::move(pending_);
  } else {
    delta.text = TakeCompleteUtf8(&pending_);
  }
  pending_.clear();
  sent_bytes_ += delta.text.size();
  finished_ = finish_now;

  total_.text += delta.text;
  total_.token_ids.insert(total_.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
  total_.logprobs.insert(total_.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  if (finish_now) total_.finish_reason = delta.finish_reason;
  return delta;
}

ChoiceOutput OutputAssembler::AddAsStreamHead(const engine::RequestOutput& output) {
  engine::RequestOutput head = output;
  head.finished = false;
  ChoiceOutput delta = Add(head);
  if (finished_ || !output.finished) return delta;  // a stop string ended it
  finished_ = true;
  delta.finish_reason = std::string(engine::FinishReasonName(output.finish_reason));
  total_.finish_reason = delta.finish_reason;
  return delta;
}

}  // namespace kvferry::server
