#include "kvferry/proxy/handoff.h"

#include <nlohmann/json.hpp>

#include "http/json_body.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

StatusOr<json> ParseObject(std::string_view body, const char* what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(std::string(what) + " is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(std::string(what) + " must be a JSON object");
  return j;
}

// The proxy drops stream_options from the bodies it sends without streaming (vLLM refuses them
// there), so it checks their type itself, as the instance would: dropped unchecked, a
// malformed one would be answered 200 (schemathesis found one).
Status CheckStreamOptions(const json& j) {
  auto so = j.find("stream_options");
  if (so == j.end() || so->is_null()) return Status::Ok();
  if (!so->is_object()) return InvalidArgumentError("'stream_options' must be an object");
  auto usage = so->find("include_usage");
  if (usage != so->end() && !usage->is_null() && !usage->is_boolean()) {
    return InvalidArgumentError("'include_usage' must be a boolean");
  }
  return Status::Ok();
}

using http::JsonBody;

}  // namespace

StatusOr<std::string> BuildPrefillBody(std::string_view client_body) {
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(client_body, "request body"));
  KVF_RETURN_IF_ERROR(CheckStreamOptions(j));
  j["kv_transfer_params"] = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                             {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                             {"remote_host", nullptr},      {"remote_port", nullptr}};
  j["stream"] = false;
  j["max_tokens"] = 1;
  if (j.contains("max_completion_tokens")) j["max_completion_tokens"] = 1;
  j.erase("min_tokens");
  j.erase("stream_options");
  return JsonBody(j);
}

StatusOr<std::string> BuildWholeOnPrefillBody(std::string_view client_body) {
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(client_body, "request body"));
  KVF_RETURN_IF_ERROR(CheckStreamOptions(j));
  j["stream"] = false;
  j.erase("stream_options");
  j.erase("kv_transfer_params");
  return JsonBody(j);
}

StatusOr<std::string> ExtractKvTransferParams(std::string_view prefill_response_body) {
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(prefill_response_body, "prefill response"));
  auto it = j.find("kv_transfer_params");
  if (it == j.end() || !it->is_object()) {
    return FailedPreconditionError(
        "prefill instance answered without kv_transfer_params; is it started with "
        "--kv-transfer-config?");
  }
  return JsonBody(*it);
}

StatusOr<std::string> BuildDecodeBody(std::string_view client_body,
                                      std::string_view kv_transfer_params_json) {
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(client_body, "request body"));
  KVF_ASSIGN_OR_RETURN(json kv, ParseObject(kv_transfer_params_json, "kv_transfer_params"));
  j["kv_transfer_params"] = std::move(kv);
  return JsonBody(j);
}

bool WantsStream(std::string_view client_body) {
  json j = json::parse(client_body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto it = j.find("stream");
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace kvferry::proxy
