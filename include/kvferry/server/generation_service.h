// GenerationService: what the HTTP layer needs from an inference engine, and OutputChannel, the
// per-request queue through which a request's outputs travel from the engine thread to the one
// HTTP thread that serves it.
//
// The engine itself is single-threaded (engine.h); EngineLoop (engine_loop.h) implements this
// interface by owning the engine on one thread. Tests implement it with a fake.
//
// Thread-safety: every GenerationService method may be called from any thread. An OutputChannel
// has one producer (the engine thread) and one consumer (an HTTP thread).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/engine/engine.h"

namespace kvferry::server {

struct GenerateRequest {
  std::string request_id;  // unique among live requests
  std::vector<int32_t> prompt_token_ids;
  engine::SamplingParams params;
  std::optional<connector::KvTransferParams> kv_transfer_params;
};

class OutputChannel {
 public:
  void Push(engine::RequestOutput output);
  // The next output in order, or DeadlineExceeded when none arrived before `deadline`.
  StatusOr<engine::RequestOutput> Pop(Deadline deadline);

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<engine::RequestOutput> queue_ GUARDED_BY(mu_);
};

class GenerationService {
 public:
  virtual ~GenerationService() = default;

  // Queues a request. Its outputs arrive on the returned channel, the last one with
  // finished == true. A request the engine refuses (bad params, prompt too long, duplicate id,
  // service stopping) gets one finished output with FinishReason::kError and `error` set.
  virtual std::shared_ptr<OutputChannel> Submit(GenerateRequest request) = 0;
  // Asks the engine to abort a request; its channel then gets a final kAbort output. Unknown or
  // finished ids are ignored.
  virtual void Abort(const std::string& request_id) = 0;

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual int32_t max_model_len() const = 0;
  // False once the engine loop has stopped or failed.
  virtual bool healthy() const = 0;
};

}  // namespace kvferry::server
