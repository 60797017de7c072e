#include "proxy/request_features.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvferry::proxy {

namespace {

using nlohmann::json;

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// The prompt as text, or as token ids; neither when the body has no usable prompt.
struct Prompt {
  std::string text;
  std::vector<int64_t> ids;
  bool is_ids = false;
};

std::string MessageText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const json& part : content) {
    if (part.is_object() && part.contains("text") && part["text"].is_string()) {
      out += part["text"].get<std::string>();
    }
  }
  return out;
}

Prompt PromptOf(const json& body) {
  Prompt p;
  if (body.contains("messages") && body["messages"].is_array()) {
    for (const json& m : body["messages"]) {
      if (!m.is_object()) continue;
      // (value("role", "") would throw on a role that is not a string: schemathesis sent one.)
      if (auto role = m.find("role"); role != m.end() && role->is_string()) {
        p.text += role->get<std::string>();
      }
      p.text += "\n";
      if (m.contains("content")) p.text += MessageText(m["content"]) + "\n";
    }
    return p;
  }
  if (!body.contains("prompt")) return p;
  json prompt = body["prompt"];
  // A one-element list holds the prompt itself (a string, or a list of ids).
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    prompt = prompt[0];
  }
  if (prompt.is_string()) {
    p.text = prompt.get<std::string>();
  } else if (prompt.is_array()) {
    p.is_ids = true;
    for (const json& t : prompt) p.ids.push_back(t.is_number_integer() ? t.get<int64_t>() : -1);
  }
  return p;
}

}  // namespace

cluster::RouteRequest RouteRequestOf(std::string_view client_body, int32_t affinity_prefix) {
  cluster::RouteRequest r;
  const json body = json::parse(client_body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return r;
  const Prompt p = PromptOf(body);
  const size_t n = affinity_prefix > 0 ? static_cast<size_t>(affinity_prefix) : 0;
  if (p.is_ids) {
    r.prompt_token_ids = static_cast<int64_t>(p.ids.size());
    if (n > 0 && p.ids.size() >= n) r.affinity_key = Fnv1a(p.ids.data(), n * sizeof(int64_t));
  } else {
    r.prompt_bytes = static_cast<int64_t>(p.text.size());
    if (n > 0 && p.text.size() >= n) r.affinity_key = Fnv1a(p.text.data(), n);
  }
  return r;
}

namespace {

// The integer at `pointer` in an answer's JSON, when there is one.
std::optional<int64_t> IntegerAt(std::string_view response_body, const char* pointer) {
  const json j = json::parse(response_body, nullptr, /*allow_exceptions=*/false);
  const json::json_pointer where(pointer);
  if (!j.is_object() || !j.contains(where) || !j[where].is_number_integer()) return std::nullopt;
  return j[where].get<int64_t>();
}

}  // namespace

std::optional<int64_t> PromptTokensOf(std::string_view response_body) {
  return IntegerAt(response_body, "/usage/prompt_tokens");
}

std::optional<int64_t> CachedTokensOf(std::string_view response_body) {
  return IntegerAt(response_body, "/usage/prompt_tokens_details/cached_tokens");
}

}  // namespace kvferry::proxy
