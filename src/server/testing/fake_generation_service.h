// FakeGenerationService (tests only): a GenerationService without a model. Request r generates
// the prompt's byte tokens again, cycled (token i = prompt[(i + 1) % prompt.size()], skipping
// specials), one token per `token_interval_ms`, each with logprob -(i + 1) / 8, until
// max_tokens; a prompt whose text starts with "FAIL" is refused with InvalidArgument, one
// starting with "EOS" stops after one token ("stop"). kv_transfer_params with do_remote_decode
// are answered with made-up remote params. Aborts are recorded.
//
// Thread-safety: as GenerationService; one producer thread per request.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/server/generation_service.h"

namespace kvferry::server::testing {

class FakeGenerationService : public GenerationService {
 public:
  explicit FakeGenerationService(int token_interval_ms = 1) : interval_ms_(token_interval_ms) {}
  ~FakeGenerationService() override {
    stop_ = true;
    std::vector<std::thread> threads;
    {
      MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::shared_ptr<OutputChannel> Submit(GenerateRequest request) override {
    auto channel = std::make_shared<OutputChannel>();
    const std::string text =
        tokenizer_.DecodeBytes(request.prompt_token_ids, /*skip_special_tokens=*/true);
    MutexLock lock(&mu_);
    submitted_.push_back(request);
    if (text.rfind("FAIL", 0) == 0) {
      engine::RequestOutput out;
      out.request_id = request.request_id;
      out.finished = true;
      out.finish_reason = engine::FinishReason::kError;
      out.error = InvalidArgumentError("fake refuses FAIL prompts");
      channel->Push(std::move(out));
      return channel;
    }
    threads_.emplace_back([this, request, channel, eos = text.rfind("EOS", 0) == 0] {
      Produce(request, channel, eos);
    });
    return channel;
  }

  void Abort(const std::string& request_id) override {
    MutexLock lock(&mu_);
    aborted_.insert(request_id);
  }
  const tokenizer::Tokenizer& tokenizer() const override { return tokenizer_; }
  int32_t max_model_len() const override { return 256; }
  bool healthy() const override { return true; }

  std::set<std::string> aborted() {
    MutexLock lock(&mu_);
    return aborted_;
  }
  std::vector<GenerateRequest> submitted() {
    MutexLock lock(&mu_);
    return submitted_;
  }
  int num_finished() const { return finished_.load(); }

 private:
  bool IsAborted(const std::string& id) {
    MutexLock lock(&mu_);
    return aborted_.count(id) > 0;
  }

  void Produce(GenerateRequest request, std::shared_ptr<OutputChannel> channel, bool eos) {
    std::vector<int32_t> bytes;
    for (int32_t t : request.prompt_token_ids) {
      if (t < 256) bytes.push_back(t);
    }
    if (bytes.empty()) bytes.push_back('x');
    for (int32_t i = 0; i < request.params.max_tokens && !stop_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms_));
      engine::RequestOutput out;
      out.request_id = request.request_id;
      out.num_prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
      if (IsAborted(request.request_id)) {
        out.finished = true;
        out.finish_reason = engine::FinishReason::kAbort;
        channel->Push(std::move(out));
        ++finished_;
        return;
      }
      out.new_token_ids.push_back(bytes[(i + 1) % bytes.size()]);
      out.new_logprobs.push_back(-(i + 1) / 8.0f);
      if (request.params.top_logprobs > 0) {
        out.top_logprobs.push_back({{out.new_token_ids[0], out.new_logprobs[0]}, {'z', -9.0f}});
      }
      const bool last = eos || i + 1 == request.params.max_tokens;
      if (last) {
        out.finished = true;
        out.finish_reason = eos ? engine::FinishReason::kStop : engine::FinishReason::kLength;
        if (request.kv_transfer_params && request.kv_transfer_params->do_remote_decode) {
          connector::KvTransferParams p;
          p.do_remote_prefill = true;
          p.remote_engine_id = "fake-p";
          p.remote_request_id = request.request_id;
          p.remote_block_ids = {kv::LogicalBlockId(3), kv::LogicalBlockId(4)};
          p.remote_host = "127.0.0.1";
          p.remote_port = 5600;
          out.kv_transfer_params = p;
        }
      }
      channel->Push(std::move(out));
      if (last) {
        ++finished_;
        return;
      }
    }
  }

  const int interval_ms_;
  tokenizer::Tokenizer tokenizer_ = tokenizer::Tokenizer::BuiltinByteLevel();
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};
  Mutex mu_;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
  std::set<std::string> aborted_ GUARDED_BY(mu_);
  std::vector<GenerateRequest> submitted_ GUARDED_BY(mu_);
};

}  // namespace kvferry::server::testing
