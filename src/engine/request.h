// Request (internal): one generation request as the scheduler tracks it.
//
// States (docs/engine.md, "Scheduler" and "Connector hooks"):
//   kWaiting              queued; may hold blocks already (after a remote load)
//   kWaitingForRemoteKv   blocks allocated, the connector is loading remote KV; the scheduler
//                         skips it (it does not block the queue) until finished_recving
//   kRunning              scheduled; computing its prompt (chunks) or decoding
// Finished requests leave the scheduler (their blocks freed, or held for a remote reader).
//
// Thread-safety: owned by the Scheduler (engine thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvferry/connector/connector.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/engine/sampling_params.h"
#include "kvferry/kv/block_table.h"

namespace kvferry::engine {

enum class RequestState : uint8_t { kWaiting, kWaitingForRemoteKv, kRunning };

struct Request {
  Request(std::string id, std::vector<int32_t> prompt, const SamplingParams& sampling,
          uint64_t sampling_seed, std::optional<connector::KvTransferParams> transfer_params,
          const kv::BlockGeometry& geometry)
      : request_id(std::move(id)),
        tokens(std::move(prompt)),
        num_prompt_tokens(static_cast<int32_t>(tokens.size())),
        params(sampling),
        seed(sampling_seed),
        kv_transfer_params(std::move(transfer_params)),
        table(geometry) {}

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }

  connector::RequestView View() const {
    connector::RequestView v;
    v.request_id = request_id;
    v.prompt_tokens = std::span<const int32_t>(tokens.data(), num_prompt_tokens);
    v.num_tokens = num_tokens();
    v.num_computed_tokens = num_computed_tokens;
    v.kv_transfer_params = kv_transfer_params ? &*kv_transfer_params : nullptr;
    v.generation_ended = generation_ended;
    v.first_token = first_output ? &*first_output : nullptr;
    return v;
  }

  std::string request_id;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t num_prompt_tokens;
  SamplingParams params;
  uint64_t seed;
  std::optional<connector::KvTransferParams> kv_transfer_params;

  RequestState state = RequestState::kWaiting;
  int32_t num_computed_tokens = 0;          // tokens whose KV is in the cache
  int32_t num_cached_tokens = 0;            // prompt tokens from the prefix cache or remote KV
  int32_t num_blocks_registered = 0;        // full blocks already offered to the prefix cache
  std::vector<kv::BlockHash> block_hashes;  // chain hashes of its first full blocks (disk tier)
  kv::BlockTable table;
  bool connector_consulted = false;     // GetNumNewMatchedTokens asked (first schedule only)
  int32_t pending_external_tokens = 0;  // remote tokens being loaded
  bool aborted = false;                 // aborted while waiting for remote KV
  std::optional<connector::LoadReport> kv_load;  // how its remote KV arrived (D)
  // Its first output token and the sampler state after it: P returns it in kv_transfer_params
  // (a D resumes from it); on D, the token P sent.
  std::optional<connector::FirstToken> first_output;
  bool generation_ended = false;  // finished by eos / a stop token / max_model_len
};

}  // namespace kvferry::engine
