#include "proxy/prefix_pull.h"

#include <nlohmann/json.hpp>

#include "http/json_body.h"
#include "kvferry/common/logging.h"
#include "kvferry/common/prometheus_text.h"
#include "kvferry/proxy/handoff.h"
#include "proxy/upstream_client.h"

namespace kvferry::proxy {

namespace {

using nlohmann::json;

StatusOr<json> Object(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(std::string(what) + " is not a JSON object");
  return j;
}

// `list` cut to its first `n` entries (an array; anything else as it is).
void CutArray(json* list, size_t n) {
  if (list->is_array() && list->size() > n) list->erase(list->begin() + n, list->end());
}

}  // namespace

StatusOr<std::string> BuildPrefixLeaseBody(std::string_view client_body,
                                           std::span<const int32_t> ids, int64_t tokens) {
  KVF_ASSIGN_OR_RETURN(json client, Object(client_body, "request body"));
  if (tokens < 0 || static_cast<size_t>(tokens) + 1 > ids.size()) {
    return InvalidArgumentError("prefix lease longer than the prompt");
  }
  json j = {{"prompt", std::vector<int32_t>(ids.begin(), ids.begin() + tokens + 1)},
            {"max_tokens", 1},
            {"temperature", 0},
            {"stream", false},
            {"kv_transfer_params", {{"do_remote_decode", true}}}};
  if (client.contains("model")) j["model"] = client["model"];
  return http::JsonBody(j);
}

StatusOr<std::string> WithPrefixSource(std::string_view prefill_body,
                                       std::string_view source_params_json, int64_t tokens,
                                       int32_t source_block_size) {
  KVF_ASSIGN_OR_RETURN(json body, Object(prefill_body, "prefill body"));
  KVF_ASSIGN_OR_RETURN(json kv, Object(source_params_json, "kv_transfer_params"));
  if (source_block_size <= 0 || tokens <= 0 || tokens % source_block_size != 0) {
    return InvalidArgumentError("a prefix lease covers whole blocks");
  }
  const size_t blocks = static_cast<size_t>(tokens / source_block_size);
  auto ids = kv.find("remote_block_ids");
  if (ids == kv.end() || !ids->is_array() || ids->size() < blocks) {
    return FailedPreconditionError("the source's lease names fewer blocks than it holds");
  }
  CutArray(&*ids, blocks);
  if (auto gens = kv.find("remote_block_generations"); gens != kv.end()) CutArray(&*gens, blocks);
  for (const char* key :
       {"first_token_id", "first_token_logprob", "first_token_top_logprobs", "sampling_seed"}) {
    kv.erase(key);
  }
  kv["remote_num_tokens"] = tokens;
  kv["do_remote_prefill"] = true;
  kv["do_remote_decode"] = true;
  body["kv_transfer_params"] = std::move(kv);
  return http::JsonBody(body);
}

std::string PrefixPuller::BodyFor(const PrefixSource& source, std::span<const int32_t> ids,
                                  const std::string& client_body, const std::string& prefill_body,
                                  const std::string& request_id, bool* leased) {
  *leased = false;
  auto fail = [&](const Status& why) {
    lease_failed_.fetch_add(1);
    KVF_LOG_WARN("prefix pull {} from {}: {}; P computes the prompt", request_id, source.member_id,
                 why.ToString());
    return prefill_body;
  };
  auto lease = BuildPrefixLeaseBody(client_body, ids, source.tokens);
  if (!lease.ok()) return fail(lease.status());
  auto answer = PostJson(source.url, upstream_, "/v1/completions", *lease, timeout_ms_);
  if (!answer.ok()) return fail(answer.status());
  if (answer->status != 200)
    return fail(UnavailableError("HTTP " + std::to_string(answer->status)));
  auto params = ExtractKvTransferParams(answer->body);
  if (!params.ok()) return fail(params.status());
  auto body = WithPrefixSource(prefill_body, *params, source.tokens, source.block_size);
  if (!body.ok()) return fail(body.status());
  leased_.fetch_add(1);
  leased_tokens_.fetch_add(source.tokens);
  *leased = true;
  return *std::move(body);
}

void PrefixPuller::CountOutcome(std::string_view p_answer) {
  json j = json::parse(p_answer, nullptr, /*allow_exceptions=*/false);
  const json* load = j.is_object() && j.contains("kv_load") ? &j["kv_load"] : nullptr;
  const std::string outcome =
      load != nullptr && load->is_object() ? load->value("outcome", "") : std::string();
  if (outcome == "pulled") {
    pulled_.fetch_add(1);
  } else if (outcome == "notify_only") {  // P held the prefix itself by then
    notify_only_.fetch_add(1);
  } else {
    pull_failed_.fetch_add(1);
  }
}

std::string PrefixPuller::RenderMetrics() const {
  PrometheusText w;
  w.Family("kvferry:proxy_prefix_pulls_total", "counter",
           "Prefill legs given another member's prefix to pull: leases taken and refused, and "
           "how P's pull went (pulled, or not: P computed those tokens).");
  w.Sample({{"outcome", "leased"}}, static_cast<double>(leased_.load()));
  w.Sample({{"outcome", "lease_failed"}}, static_cast<double>(lease_failed_.load()));
  w.Sample({{"outcome", "pulled"}}, static_cast<double>(pulled_.load()));
  w.Sample({{"outcome", "notify_only"}}, static_cast<double>(notify_only_.load()));
  w.Sample({{"outcome", "pull_failed"}}, static_cast<double>(pull_failed_.load()));
  w.Family("kvferry:proxy_prefix_pull_tokens_total", "counter",
           "Prompt tokens of the leases given to prefill legs.");
  w.Sample({}, static_cast<double>(leased_tokens_.load()));
  return w.Take();
}

}  // namespace kvferry::proxy
