// KvTransferParams: the per-request hand-off record between P, the proxy and D, with vLLM's
// field names so vLLM-style proxies can drive kvferry (docs/connector.md §2).
//
//   proxy -> P : {"do_remote_decode": true}
//   P -> proxy : {"do_remote_prefill": true, "remote_engine_id": ..., "remote_request_id": ...,
//                 "remote_block_ids": [...logical ids...], "remote_host": ..., "remote_port": ...,
//                 "tp_size": 1, "remote_block_generations": [...], "remote_num_tokens": n}
//   proxy -> D : the same object, copied verbatim
//
// remote_block_ids are LOGICAL block ids of P, in P's block_size_logical.
// remote_block_generations (kvferry's addition; vLLM ignores unknown keys) are the lease
// generations of those blocks when P granted the lease, one per id: D re-reads P's generation
// table after its data read and treats any difference as a load failure (docs/connector.md).
// remote_num_tokens (kvferry's addition) is how many leading prompt tokens the offered blocks
// hold: the whole prompt normally, fewer when P withheld blocks it could not stage (D then
// computes the rest itself). Absent (-1): the whole prompt, as vLLM's P means it.
//
// The first output token (kvferry's addition, docs/connector.md §2 "Resuming from P's first
// token"): P samples the first output token with the request's own sampling parameters and
// returns it, so D appends it as already generated, pulls the KV of every prompt token and
// starts decoding at position prompt_len (output index 1) instead of recomputing the last
// prompt token:
//   "first_token_id": 42, "first_token_logprob": -0.25,
//   "first_token_top_logprobs": [[42, -0.25], [7, -1.5]]   (only when alternatives were asked)
//   "sampling_seed": 1234                                   (the seed P's sampler drew with)
// first_token_id needs first_token_logprob and sampling_seed. Params without first_token_id
// (vLLM's P) keep the older hand-off: D computes the last prompt token itself.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::connector {

// One alternative of the first token's logprobs: token id and its log probability.
struct FirstTokenAlternative {
  int32_t token_id = 0;
  float logprob = 0.0f;
  friend bool operator==(const FirstTokenAlternative&, const FirstTokenAlternative&) = default;
};

// The first output token P sampled, and the sampler state D continues from.
struct FirstToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<FirstTokenAlternative> top_logprobs;  // best first; empty unless asked for
  uint64_t sampling_seed = 0;  // D samples output index i >= 1 with (sampling_seed, i)
  friend bool operator==(const FirstToken&, const FirstToken&) = default;
};

struct KvTransferParams {
  bool do_remote_decode = false;   // P: hold the blocks for a remote reader
  bool do_remote_prefill = false;  // D: the prompt's KV is on a remote engine
  std::string remote_engine_id;
  std::string remote_request_id;
  std::vector<kv::LogicalBlockId> remote_block_ids;  // P's logical ids, in P's geometry
  std::string remote_host;
  int32_t remote_port = 0;
  int32_t tp_size = 1;
  std::vector<uint64_t> remote_block_generations;  // empty, or one per remote_block_ids entry
  int32_t remote_num_tokens = -1;                  // -1: the whole prompt
  std::optional<FirstToken> first_token;           // set by a kvferry P (see above)

  friend bool operator==(const KvTransferParams&, const KvTransferParams&) = default;
};

// Parses a request's "kv_transfer_params" object. Unknown keys are ignored (vLLM adds fields over
// versions); wrong types, negative ids or ports out of range are InvalidArgument naming the field.
// With do_remote_prefill, the fields D needs (remote_engine_id, remote_request_id,
// remote_block_ids, remote_host, remote_port) must all be present. first_token_id without
// first_token_logprob or sampling_seed, a negative id, a non-finite or positive logprob, or a
// malformed alternative is InvalidArgument naming the field.
StatusOr<KvTransferParams> ParseKvTransferParams(const nlohmann::json& j);

// The JSON object P returns (or the proxy forwards). Round-trips with ParseKvTransferParams.
nlohmann::json ToJson(const KvTransferParams& params);

}  // namespace kvferry::connector
