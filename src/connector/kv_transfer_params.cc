#include "kvferry/connector/kv_transfer_params.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "connector/json_fields.h"

namespace kvferry::connector {
namespace {

// A log probability: a finite number <= 0.
StatusOr<float> Logprob(const JsonFields& fields, const char* key, const nlohmann::json& v) {
  if (!v.is_number()) return fields.Error(key, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > 0.0 || x < -std::numeric_limits<float>::max()) {
    return fields.Error(key, "must be a finite number <= 0");
  }
  return static_cast<float>(x);
}

// first_token_* and sampling_seed; absent first_token_id: no first token (older P).
Status ParseFirstToken(const JsonFields& fields, KvTransferParams* p) {
  FirstToken first;
  bool has_id = false;
  KVF_RETURN_IF_ERROR(fields.Integer("first_token_id", 0, std::numeric_limits<int32_t>::max(),
                                     &first.token_id, &has_id));
  const nlohmann::json* logprob = fields.Find("first_token_logprob");
  const nlohmann::json* top = fields.Find("first_token_top_logprobs");
  const nlohmann::json* seed = fields.Find("sampling_seed");
  if (!has_id) {
    if (logprob != nullptr || top != nullptr) {
      return fields.Error(logprob != nullptr ? "first_token_logprob" : "first_token_top_logprobs",
                          "needs first_token_id");
    }
    return Status::Ok();
  }
  if (logprob == nullptr)
    return fields.Error("first_token_logprob", "required with first_token_id");
  if (seed == nullptr) return fields.Error("sampling_seed", "required with first_token_id");
  KVF_ASSIGN_OR_RETURN(first.logprob, Logprob(fields, "first_token_logprob", *logprob));
  if (!seed->is_number_unsigned() && !(seed->is_number_integer() && seed->get<int64_t>() >= 0)) {
    return fields.Error("sampling_seed", "must be a non-negative integer");
  }
  first.sampling_seed = seed->get<uint64_t>();
  if (top != nullptr) {
    if (!top->is_array() || top->size() > 20) {
      return fields.Error("first_token_top_logprobs", "must be an array of at most 20 entries");
    }
    for (const auto& alt : *top) {
      if (!alt.is_array() || alt.size() != 2 || !alt[0].is_number_integer() ||
          alt[0].get<int64_t>() < 0 ||
          alt[0].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return fields.Error("first_token_top_logprobs", "entries must be [token_id, logprob]");
      }
      KVF_ASSIGN_OR_RETURN(float lp, Logprob(fields, "first_token_top_logprobs", alt[1]));
      first.top_logprobs.push_back({static_cast<int32_t>(alt[0].get<int64_t>()), lp});
    }
  }
  p->first_token = std::move(first);
  return Status::Ok();
}

nlohmann::json FirstTokenJson(const FirstToken& first, nlohmann::json j) {
  j["first_token_id"] = first.token_id;
  j["first_token_logprob"] = first.logprob;
  if (!first.top_logprobs.empty()) {
    nlohmann::json top = nlohmann::json::array();
    for (const FirstTokenAlternative& a : first.top_logprobs)
      top.push_back({a.token_id, a.logprob});
    j["first_token_top_logprobs"] = std::move(top);
  }
  j["sampling_seed"] = first.sampling_seed;
  return j;
}

}  // namespace

StatusOr<KvTransferParams> ParseKvTransferParams(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgumentError("kv_transfer_params must be a JSON object");
  KvTransferParams p;
  const JsonFields fields(j, "kv_transfer_params.");
  KVF_RETURN_IF_ERROR(fields.Bool("do_remote_decode", &p.do_remote_decode));
  KVF_RETURN_IF_ERROR(fields.Bool("do_remote_prefill", &p.do_remote_prefill));
  bool has_engine = false, has_request = false, has_host = false, has_port = false, has_tp = false;
  KVF_RETURN_IF_ERROR(fields.String("remote_engine_id", &p.remote_engine_id, &has_engine));
  KVF_RETURN_IF_ERROR(fields.String("remote_request_id", &p.remote_request_id, &has_request));
  KVF_RETURN_IF_ERROR(fields.String("remote_host", &p.remote_host, &has_host));
  KVF_RETURN_IF_ERROR(fields.Integer("remote_port", 0, 65535, &p.remote_port, &has_port));
  KVF_RETURN_IF_ERROR(fields.Integer("tp_size", 1, 1 << 20, &p.tp_size, &has_tp));
  if (!has_tp) {
    // Older vLLM tests spell it remote_tp_size.
    KVF_RETURN_IF_ERROR(fields.Integer("remote_tp_size", 1, 1 << 20, &p.tp_size, &has_tp));
  }
  bool has_blocks = false;
  if (const nlohmann::json* ids = fields.Find("remote_block_ids")) {
    has_blocks = true;
    if (!ids->is_array()) return fields.Error("remote_block_ids", "must be an array");
    p.remote_block_ids.reserve(ids->size());
    for (const auto& id : *ids) {
      if (!id.is_number_integer()) {
        return fields.Error("remote_block_ids", "entries must be integers");
      }
      if (id.is_number_unsigned() &&
          id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        return fields.Error("remote_block_ids", "entry out of range");
      }
      int64_t v = id.get<int64_t>();
      if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
        return fields.Error("remote_block_ids", fmt::format("entry {} out of range", v));
      }
      p.remote_block_ids.emplace_back(static_cast<int32_t>(v));
    }
  }
  if (const nlohmann::json* gens = fields.Find("remote_block_generations")) {
    if (!gens->is_array()) return fields.Error("remote_block_generations", "must be an array");
    for (const auto& g : *gens) {
      if (!g.is_number_unsigned() && !(g.is_number_integer() && g.get<int64_t>() >= 0)) {
        return fields.Error("remote_block_generations", "entries must be non-negative integers");
      }
      p.remote_block_generations.push_back(g.get<uint64_t>());
    }
    if (p.remote_block_generations.size() != p.remote_block_ids.size()) {
      return fields.Error(
          "remote_block_generations",
          fmt::format("has {} entries for {} remote_block_ids", p.remote_block_generations.size(),
                      p.remote_block_ids.size()));
    }
  }
  bool has_num_tokens = false;
  KVF_RETURN_IF_ERROR(fields.Integer("remote_num_tokens", 0, std::numeric_limits<int32_t>::max(),
                                     &p.remote_num_tokens, &has_num_tokens));
  KVF_RETURN_IF_ERROR(ParseFirstToken(fields, &p));
  if (p.do_remote_prefill) {
    const char* missing = !has_engine    ? "remote_engine_id"
                          : !has_request ? "remote_request_id"
                          : !has_blocks  ? "remote_block_ids"
                          : !has_host    ? "remote_host"
                          : !has_port    ? "remote_port"
                                         : nullptr;
    if (missing != nullptr) return fields.Error(missing, "required with do_remote_prefill");
  }
  return p;
}

nlohmann::json ToJson(const KvTransferParams& params) {
  nlohmann::json j = nlohmann::json::object();
  j["do_remote_decode"] = params.do_remote_decode;
  j["do_remote_prefill"] = params.do_remote_prefill;
  // Every remote_* field that is set is written, so ToJson(p) parses back to p (found by
  // tests/fuzz/fuzz_kv_params: ids without an engine id were dropped, and generations without
  // their ids then failed to parse).
  if (params.do_remote_prefill || !params.remote_engine_id.empty() ||
      !params.remote_request_id.empty() || !params.remote_block_ids.empty() ||
      !params.remote_host.empty() || params.remote_port != 0 || params.tp_size != 1 ||
      !params.remote_block_generations.empty()) {
    j["remote_engine_id"] = params.remote_engine_id;
    j["remote_request_id"] = params.remote_request_id;
    nlohmann::json ids = nlohmann::json::array();
    for (kv::LogicalBlockId id : params.remote_block_ids) ids.push_back(id.value());
    j["remote_block_ids"] = std::move(ids);
    j["remote_host"] = params.remote_host;
    j["remote_port"] = params.remote_port;
    j["tp_size"] = params.tp_size;
  }
  if (!params.remote_block_generations.empty()) {
    j["remote_block_generations"] = params.remote_block_generations;
  }
  if (params.remote_num_tokens >= 0) j["remote_num_tokens"] = params.remote_num_tokens;
  if (params.first_token) return FirstTokenJson(*params.first_token, std::move(j));
  return j;
}

}  // namespace kvferry::connector
