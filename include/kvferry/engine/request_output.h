// What the engine reports per step and per request, and its counters: the value types of
// Engine::Step() and Engine::stats(), apart from the Engine so that the scheduler (which fills
// them) needs no Engine. Plain values; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/connector/connector.h"
#include "kvferry/connector/kv_transfer_params.h"

namespace kvferry::engine {

enum class FinishReason : uint8_t {
  kNone = 0,  // still running
  kStop,      // eos or a stop token
  kLength,    // max_tokens reached, or max_model_len
  kAbort,     // Abort() was called
  kError,     // see RequestOutput::error (e.g. remote KV load failed with policy fail)
};
std::string_view FinishReasonName(FinishReason reason);  // "stop" | "length" | "abort" | ...

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// What one Step() produced for one request. A request appears in a Step's result when it got
// new tokens or finished; its final appearance has finished == true (exactly once).
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<float> new_logprobs;                      // log p of each new token, same order
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per new token, when top_logprobs > 0
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;                                                   // set with kError
  std::optional<connector::KvTransferParams> kv_transfer_params;  // from the connector, at finish
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache or remote KV
  // D, final output of a request that came with do_remote_prefill: how its KV arrived (pulled,
  // notification only, or which failure made it recompute).
  std::optional<connector::LoadReport> kv_load;
};

// Pool and scheduler counters, for /metrics. Blocks are logical blocks.
struct EngineStats {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_free = 0;    // free, not caching a prefix
  int32_t num_blocks_cached = 0;  // free but holding a reusable prefix (evictable)
  int32_t num_blocks_used = 0;    // referenced by requests
  int32_t num_blocks_held = 0;    // held for a remote reader (delayed free)
  int32_t num_waiting = 0;
  int32_t num_running = 0;
  int32_t num_waiting_for_remote_kv = 0;
  // Prompt tokens of waiting and running requests not computed yet (a proxy routes prefills by
  // it); requests loading remote KV are not counted, their tokens arrive by transfer.
  int64_t num_pending_prefill_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens_computed = 0;
  int64_t num_prefix_cache_hit_tokens = 0;
  int64_t num_disk_hit_tokens = 0;  // of those, read back from the disk tier
  int64_t num_generated_tokens = 0;
  int64_t num_steps = 0;
};

}  // namespace kvferry::engine
