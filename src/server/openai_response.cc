// Formatting of OpenAI responses and server-sent events (openai_protocol.h).
#include <nlohmann/json.hpp>

#include "http/json_body.h"
#include "kvferry/server/openai_protocol.h"

namespace kvferry::server {
namespace {

using nlohmann::json;

using http::JsonBody;

// The JSON writer replaces invalid UTF-8; `bytes` keeps the exact token bytes (chat format).
json BytesOf(const std::string& s) {
  json arr = json::array();
  for (unsigned char c : s) arr.push_back(static_cast<int>(c));
  return arr;
}

json CompletionLogprobs(const ChoiceOutput& c) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int32_t offset = c.text_offset;
  for (const TokenLogprobInfo& t : c.logprobs) {
    tokens.push_back(t.text);
    token_logprobs.push_back(t.logprob);
    json alts = json::object();
    for (const auto& [text, lp] : t.top) {
      if (!alts.contains(text)) alts[text] = lp;
    }
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += static_cast<int32_t>(t.text.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json ChatLogprobs(const ChoiceOutput& c) {
  json content = json::array();
  for (const TokenLogprobInfo& t : c.logprobs) {
    json alts = json::array();
    for (const auto& [text, lp] : t.top) {
      alts.push_back({{"token", text}, {"logprob", lp}, {"bytes", BytesOf(text)}});
    }
    content.push_back({{"token", t.text},
                       {"logprob", t.logprob},
                       {"bytes", BytesOf(t.text)},
                       {"top_logprobs", std::move(alts)}});
  }
  return {{"content", std::move(content)}};
}

json FinishReason(const ChoiceOutput& c) {
  return c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
}

json Choice(const ResponseHeader& h, const ChoiceOutput& c, bool stream, bool first) {
  json choice = {{"index", 0}};
  if (h.kind == ApiKind::kCompletion) {
    choice["text"] = c.text;
    choice["logprobs"] = h.logprobs ? CompletionLogprobs(c) : json(nullptr);
  } else {
    json message = {{"content", c.text}};
    if (!stream || first) message["role"] = "assistant";
    choice[stream ? "delta" : "message"] = std::move(message);
    choice["logprobs"] = h.logprobs ? ChatLogprobs(c) : json(nullptr);
  }
  if (h.return_token_ids) {
    // vLLM's fields: the prompt's ids on a completion choice (first chunk of a stream), the
    // generated ids (this chunk's) on every choice.
    if (h.kind == ApiKind::kCompletion && (!stream || first)) {
      choice["prompt_token_ids"] = h.prompt_token_ids;
    }
    choice["token_ids"] = c.token_ids;
  }
  choice["finish_reason"] = FinishReason(c);
  return choice;
}

json Envelope(const ResponseHeader& h, bool stream) {
  const char* object = h.kind == ApiKind::kCompletion
                           ? "text_completion"
                           : (stream ? "chat.completion.chunk" : "chat.completion");
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json LoadJson(const connector::LoadReport& r) {
  json j = {{"outcome", connector::LoadOutcomeName(r.outcome)},
            {"local_hit_tokens", r.local_hit_tokens},
            {"pulled_tokens", r.tokens},
            {"pulled_bytes", r.bytes},
            {"pulled_bytes_by_memcpy", r.bytes_by_memcpy},
            {"descriptors", r.descriptors}};
  // A tensor-parallel D: what each of its ranks read, and from which P ranks.
  if (r.ranks.size() > 1) {
    json ranks = json::array();
    for (const connector::RankLoad& rank : r.ranks) {
      ranks.push_back({{"rank", rank.rank},
                       {"source_ranks", rank.source_ranks},
                       {"pulled_bytes", rank.bytes},
                       {"descriptors", rank.descriptors}});
    }
    j["ranks"] = std::move(ranks);
  }
  return j;
}

}  // namespace

std::string FormatResponse(const ResponseHeader& header, const ChoiceOutput& choice,
                           const Usage& usage, const KvHandoff& kv) {
  json j = Envelope(header, /*stream=*/false);
  j["choices"] = json::array({Choice(header, choice, /*stream=*/false, /*first=*/true)});
  if (header.return_token_ids && header.kind == ApiKind::kChat) {
    j["prompt_token_ids"] = header.prompt_token_ids;
  }
  j["usage"] = UsageJson(usage);
  j["kv_transfer_params"] = kv.params ? connector::ToJson(*kv.params) : json();
  if (kv.load) j["kv_load"] = LoadJson(*kv.load);
  return JsonBody(j);
}

std::string FormatStreamChunk(const ResponseHeader& header, const ChoiceOutput& delta, bool first,
                              const KvHandoff& kv) {
  json j = Envelope(header, /*stream=*/true);
  j["choices"] = json::array({Choice(header, delta, /*stream=*/true, first)});
  if (header.return_token_ids && header.kind == ApiKind::kChat && first) {
    j["prompt_token_ids"] = header.prompt_token_ids;
  }
  if (kv.params) j["kv_transfer_params"] = connector::ToJson(*kv.params);
  if (kv.load) j["kv_load"] = LoadJson(*kv.load);
  return "data: " + JsonBody(j) + "\n\n";
}

std::string FormatUsageChunk(const ResponseHeader& header, const Usage& usage) {
  json j = Envelope(header, /*stream=*/true);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return "data: " + JsonBody(j) + "\n\n";
}

std::string FormatStreamError(const std::string& error_body) {
  return "data: " + error_body + "\n\n";
}

std::string TakeCompleteUtf8(std::string* pending) {
  const std::string& s = *pending;
  // Look back at most 3 bytes for the start of a multi-byte sequence that is not complete yet.
  size_t keep_from = s.size();
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    if (need > back) keep_from = s.size() - back;
    break;
  }
  std::string out = s.substr(0, keep_from);
  pending->erase(0, keep_from);
  return out;
}

}  // namespace kvferry::server
