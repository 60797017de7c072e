// Parsing of OpenAI request bodies (openai_protocol.h).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "kvferry/server/openai_protocol.h"

namespace kvferry::server {
namespace {

using nlohmann::json;

const json* Field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

Status TypeError(const char* key, const char* expected) {
  return InvalidArgumentError(std::string("'") + key + "' must be " + expected);
}

Status GetBool(const json& j, const char* key, bool* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return TypeError(key, "a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

Status GetInt(const json& j, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return TypeError(key, "an integer");
  }
  if (x < lo || x > hi) {
    return InvalidArgumentError(std::string("'") + key + "' must be in [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "], got " + std::to_string(x));
  }
  *out = x;
  return Status::Ok();
}

Status GetNumber(const json& j, const char* key, double lo, double hi, std::optional<double>* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return TypeError(key, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return InvalidArgumentError(std::string("'") + key + "' is out of range: " + v->dump());
  }
  *out = x;
  return Status::Ok();
}

Status ParseTokenArray(const json& arr, const char* key, std::vector<int32_t>* out) {
  for (const json& t : arr) {
    if (!t.is_number_integer()) return TypeError(key, "a string or an array of token ids");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError(std::string("'") + key + "' has an invalid token id " +
                                  std::to_string(id));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return Status::Ok();
}

Status ParsePrompt(const json& j, OpenAiRequest* req) {
  const json* p = Field(j, "prompt");
  if (p == nullptr) return InvalidArgumentError("'prompt' is required");
  const json* v = p;
  if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
    if (p->size() != 1) {
      return InvalidArgumentError(
          "'prompt' with several prompts (batch) is not supported; "
          "send one prompt per request");
    }
    v = &p->at(0);
  }
  if (v->is_string()) {
    req->prompt_text = v->get<std::string>();
    if (req->prompt_text.empty()) return InvalidArgumentError("'prompt' must not be empty");
    return Status::Ok();
  }
  if (v->is_array()) {
    KVF_RETURN_IF_ERROR(ParseTokenArray(*v, "prompt", &req->prompt_token_ids));
    if (req->prompt_token_ids.empty()) return InvalidArgumentError("'prompt' must not be empty");
    req->prompt_is_tokens = true;
    return Status::Ok();
  }
  return TypeError("prompt", "a string or an array of token ids");
}

// A message's content as the template sees it: a string (text parts joined), or null.
StatusOr<nlohmann::ordered_json> ContentText(const nlohmann::ordered_json& content) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    return TypeError("messages[].content", "a string or an array of text parts");
  std::string text;
  for (const auto& part : content) {
    // (value("type", "") would throw on a "type" that is not a string: schemathesis sent {}.)
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return InvalidArgumentError("'messages[].content' parts must be {\"type\": \"text\"}");
    }
    text += part["text"].get<std::string>();
  }
  return nlohmann::ordered_json(text);
}

// "messages", kept in the client's key order (a template printing tool-call arguments with
// tojson must show them as sent), each with a string role and its content as text.
Status ParseMessages(std::string_view body, OpenAiRequest* req) {
  const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  const auto m = j.find("messages");
  if (m == j.end() || m->is_null()) return InvalidArgumentError("'messages' is required");
  if (!m->is_array() || m->empty()) return TypeError("messages", "a non-empty array");
  for (const auto& msg : *m) {
    if (!msg.is_object()) return TypeError("messages", "an array of objects");
    if (!msg.contains("role") || !msg["role"].is_string()) {
      return TypeError("messages[].role", "a string");
    }
    nlohmann::ordered_json out = msg;
    // An assistant message may carry no content (tool calls only).
    KVF_ASSIGN_OR_RETURN(out["content"],
                         ContentText(msg.contains("content") ? msg["content"] : nullptr));
    req->chat_messages.push_back(std::move(out));
  }
  return Status::Ok();
}

// The chat template's inputs besides the messages (vLLM's request fields).
Status ParseChatTemplateFields(std::string_view body, OpenAiRequest* req) {
  const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return TypeError("tools", "an array");
    req->tools = *t;
  }
  if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
    if (!k->is_object()) return TypeError("chat_template_kwargs", "an object");
    req->chat_template_kwargs = *k;
  }
  if (auto g = j.find("add_generation_prompt"); g != j.end() && !g->is_null()) {
    if (!g->is_boolean()) return TypeError("add_generation_prompt", "a boolean");
    req->add_generation_prompt = g->get<bool>();
  }
  return Status::Ok();
}

Status AddStop(const std::string& s, OpenAiRequest* req) {
  if (s.size() > kMaxStopStringBytes) {
    return InvalidArgumentError("'stop': a stop string of " + std::to_string(s.size()) +
                                " bytes; at most " + std::to_string(kMaxStopStringBytes));
  }
  if (!s.empty()) req->stop.push_back(s);
  return Status::Ok();
}

Status ParseStop(const json& j, OpenAiRequest* req) {
  const json* s = Field(j, "stop");
  if (s == nullptr) return Status::Ok();
  if (s->is_string()) return AddStop(s->get<std::string>(), req);
  if (!s->is_array()) return TypeError("stop", "a string or an array of strings");
  if (s->size() > kMaxStopStrings) {
    return InvalidArgumentError("'stop': " + std::to_string(s->size()) + " stop strings; at most " +
                                std::to_string(kMaxStopStrings));
  }
  for (const json& x : *s) {
    if (!x.is_string()) return TypeError("stop", "a string or an array of strings");
    KVF_RETURN_IF_ERROR(AddStop(x.get<std::string>(), req));
  }
  return Status::Ok();
}

// max_tokens, temperature, top_p, top_k, seed, n.
Status ParseSampling(const json& j, OpenAiRequest* req) {
  std::optional<int64_t> i;
  std::optional<double> d;
  const int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  // Chat prefers max_completion_tokens (max_tokens is deprecated there, still accepted).
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    i.reset();
    KVF_RETURN_IF_ERROR(GetInt(j, key, 1, kMaxInt, &i));
    if (i) {
      req->params.max_tokens = static_cast<int32_t>(*i);
      req->max_tokens_set = true;
    }
  }
  // OpenAI's default temperature is 1; greedy (0) is what reproducible serving asks for, and
  // what vLLM's accuracy tests send. A missing temperature means 1.0 as in OpenAI.
  req->params.temperature = 1.0f;
  KVF_RETURN_IF_ERROR(GetNumber(j, "temperature", 0.0, 1e6, &d));
  if (d) req->params.temperature = static_cast<float>(*d);
  d.reset();
  KVF_RETURN_IF_ERROR(GetNumber(j, "top_p", 0.0, 1.0, &d));
  if (d) {
    if (*d <= 0.0) return InvalidArgumentError("'top_p' must be in (0, 1]");
    req->params.top_p = static_cast<float>(*d);
  }
  i.reset();
  KVF_RETURN_IF_ERROR(GetInt(j, "top_k", -1, kMaxInt, &i));
  if (i) req->params.top_k = *i < 0 ? 0 : static_cast<int32_t>(*i);  // vLLM: -1 is off
  i.reset();
  KVF_RETURN_IF_ERROR(GetInt(j, "seed", std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), &i));
  if (i) req->params.seed = static_cast<uint64_t>(*i);
  i.reset();
  KVF_RETURN_IF_ERROR(GetInt(j, "n", 1, kMaxInt, &i));
  if (i && *i != 1) return InvalidArgumentError("'n' must be 1 (one choice per request)");
  return Status::Ok();
}

// Completions: logprobs is a count; chat: logprobs is a flag and top_logprobs the count.
Status ParseLogprobs(const json& j, OpenAiRequest* req) {
  std::optional<int64_t> i;
  if (req->kind == ApiKind::kCompletion) {
    KVF_RETURN_IF_ERROR(GetInt(j, "logprobs", 0, 20, &i));
    if (i) {
      req->logprobs = true;
      req->params.top_logprobs = static_cast<int32_t>(*i);
    }
    return Status::Ok();
  }
  KVF_RETURN_IF_ERROR(GetBool(j, "logprobs", &req->logprobs));
  KVF_RETURN_IF_ERROR(GetInt(j, "top_logprobs", 0, 20, &i));
  if (i) {
    if (!req->logprobs) return InvalidArgumentError("'top_logprobs' requires 'logprobs': true");
    req->params.top_logprobs = static_cast<int32_t>(*i);
  }
  return Status::Ok();
}

// stop_token_ids, ignore_eos, return_token_ids, kv_transfer_params.
Status ParseTokenControls(const json& j, OpenAiRequest* req) {
  if (const json* st = Field(j, "stop_token_ids")) {
    if (!st->is_array()) return TypeError("stop_token_ids", "an array of token ids");
    if (st->size() > kMaxStopTokenIds) {
      return InvalidArgumentError("'stop_token_ids': " + std::to_string(st->size()) +
                                  " ids; at most " + std::to_string(kMaxStopTokenIds));
    }
    KVF_RETURN_IF_ERROR(ParseTokenArray(*st, "stop_token_ids", &req->params.stop_token_ids));
  }
  KVF_RETURN_IF_ERROR(GetBool(j, "ignore_eos", &req->params.ignore_eos));
  KVF_RETURN_IF_ERROR(GetBool(j, "return_token_ids", &req->return_token_ids));
  if (const json* kv = Field(j, "kv_transfer_params")) {
    if (!kv->is_object()) return TypeError("kv_transfer_params", "an object");
    auto parsed = connector::ParseKvTransferParams(*kv);
    if (!parsed.ok()) return parsed.status().WithContext("kv_transfer_params");
    req->kv_transfer_params = std::move(parsed).value();
  }
  return Status::Ok();
}

StatusOr<OpenAiRequest> ParseRequestBody(ApiKind kind, std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("request body is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError("request body must be a JSON object");

  OpenAiRequest req;
  req.kind = kind;
  if (const json* m = Field(j, "model")) {
    if (!m->is_string()) return TypeError("model", "a string");
    req.model = m->get<std::string>();
  }
  if (kind == ApiKind::kCompletion) {
    KVF_RETURN_IF_ERROR(ParsePrompt(j, &req));
  } else {
    KVF_RETURN_IF_ERROR(ParseMessages(body, &req));
    KVF_RETURN_IF_ERROR(ParseChatTemplateFields(body, &req));
  }
  if (const json* a = Field(j, "add_special_tokens")) {
    if (!a->is_boolean()) return TypeError("add_special_tokens", "a boolean");
    req.add_special_tokens = a->get<bool>();
  }
  KVF_RETURN_IF_ERROR(ParseSampling(j, &req));
  KVF_RETURN_IF_ERROR(GetBool(j, "stream", &req.stream));
  if (const json* so = Field(j, "stream_options")) {
    if (!so->is_object()) return TypeError("stream_options", "an object");
    KVF_RETURN_IF_ERROR(GetBool(*so, "include_usage", &req.include_usage));
  }
  KVF_RETURN_IF_ERROR(ParseLogprobs(j, &req));
  KVF_RETURN_IF_ERROR(ParseStop(j, &req));
  KVF_RETURN_IF_ERROR(ParseTokenControls(j, &req));
  return req;
}

}  // namespace

StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, std::string_view body) {
  // Every field is read with its type checked first; a JSON exception escaping anyway is a
  // parser bug, and still the client's body: a 400 naming it, never httplib's bare 500.
  try {
    return ParseRequestBody(kind, body);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("request body: ") + e.what());
  }
}

}  // namespace kvferry::server
