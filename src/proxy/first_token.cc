#include "proxy/first_token.h"

#include <nlohmann/json.hpp>

#include "http/json_body.h"

namespace kvferry::proxy {
namespace {

using nlohmann::json;

using http::JsonBody;

StatusOr<json> ParseCompletion(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError("prefill response is not a JSON object");
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->size() != 1 ||
      !(*choices)[0].is_object()) {
    return InvalidArgumentError("prefill response has no single choice");
  }
  return j;
}

}  // namespace

StatusOr<PrefillAnswer> ReadPrefillAnswer(std::string_view body) {
  KVF_ASSIGN_OR_RETURN(json j, ParseCompletion(body));
  PrefillAnswer a;
  auto kv = j.find("kv_transfer_params");
  if (kv != j.end() && kv->is_object()) {
    a.kv_transfer_params = JsonBody(*kv);
    auto id = kv->find("first_token_id");
    a.has_first_token = id != kv->end() && id->is_number_integer();
    auto blocks = kv->find("remote_block_ids");
    a.holds_blocks = blocks != kv->end() && blocks->is_array() && !blocks->empty();
  }
  const json& reason = j["choices"][0]["finish_reason"];
  if (reason.is_string()) a.finish_reason = reason.get<std::string>();
  return a;
}

PrefillAnswer WithoutFirstToken(PrefillAnswer answer) {
  answer.has_first_token = false;
  json kv = json::parse(answer.kv_transfer_params, nullptr, /*allow_exceptions=*/false);
  if (!kv.is_object()) return answer;
  for (const char* key :
       {"first_token_id", "first_token_logprob", "first_token_top_logprobs", "sampling_seed"}) {
    kv.erase(key);
  }
  answer.kv_transfer_params = JsonBody(kv);
  return answer;
}

std::optional<int64_t> ClientMaxTokens(std::string_view client_body) {
  json j = json::parse(client_body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  std::optional<int64_t> out;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) out = it->get<int64_t>();
  }
  return out;
}

StatusOr<std::string> PrefillAnswerAsChunk(std::string_view body, bool final) {
  KVF_ASSIGN_OR_RETURN(json j, ParseCompletion(body));
  j.erase("usage");
  j.erase("kv_transfer_params");
  j.erase("kv_load");
  json& choice = j["choices"][0];
  if (j.value("object", "") == "chat.completion") {
    j["object"] = "chat.completion.chunk";
    json delta = choice.value("message", json::object());
    delta["role"] = "assistant";
    choice.erase("message");
    choice["delta"] = std::move(delta);
  }
  if (!final) choice["finish_reason"] = nullptr;
  return "data: " + JsonBody(j) + "\n\n";
}

std::string PrefillUsageChunk(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("usage")) return "";
  std::string object = j.value("object", "text_completion");
  if (object == "chat.completion") object = "chat.completion.chunk";
  json chunk = {{"id", j.value("id", "")},          {"object", object},
                {"created", j.value("created", 0)}, {"model", j.value("model", "")},
                {"choices", json::array()},         {"usage", j["usage"]}};
  return "data: " + JsonBody(chunk) + "\n\n";
}

bool WantsUsageChunk(std::string_view client_body) {
  json j = json::parse(client_body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto it = j.find("stream_options");
  if (it == j.end() || !it->is_object()) return false;
  auto u = it->find("include_usage");
  return u != it->end() && u->is_boolean() && u->get<bool>();
}

}  // namespace kvferry::proxy
