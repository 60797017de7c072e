// Tokenizer::FromHuggingFaceJson / FromHuggingFaceFiles: a Pipeline from the sections of a
// Hugging Face tokenizer.json and the special tokens of a tokenizer_config.json.
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kvferry/common/utf8.h"
#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/json_section.h"
#include "tokenizer/pipeline.h"

namespace kvferry::tokenizer {
namespace {

constexpr const char* kJsonFile = "tokenizer.json";
constexpr const char* kConfigFile = "tokenizer_config.json";

StatusOr<nlohmann::json> ParseObject(std::string_view text, const char* file) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError(fmt::format("{}: not a JSON object", file));
  }
  return j;
}

StatusOr<std::vector<AddedToken>> AddedTokensFromJson(const JsonSection& top) {
  std::vector<AddedToken> tokens;
  const JsonSection list = top.Member("added_tokens");
  if (list.IsNull()) return tokens;
  if (!list.json().is_array()) return list.Invalid("must be an array");
  for (size_t i = 0; i < list.json().size(); ++i) {
    const JsonSection e = list.Element(i);
    AddedToken t;
    KVF_ASSIGN_OR_RETURN(int64_t id, e.IntOr("id", -1, 0, INT32_MAX - 1));
    if (id < 0) return e.Invalid("missing \"id\"");
    t.id = static_cast<int32_t>(id);
    KVF_ASSIGN_OR_RETURN(t.content, e.String("content"));
    KVF_ASSIGN_OR_RETURN(t.single_word, e.BoolOr("single_word", false));
    KVF_ASSIGN_OR_RETURN(t.lstrip, e.BoolOr("lstrip", false));
    KVF_ASSIGN_OR_RETURN(t.rstrip, e.BoolOr("rstrip", false));
    KVF_ASSIGN_OR_RETURN(t.special, e.BoolOr("special", false));
    KVF_ASSIGN_OR_RETURN(t.normalized, e.BoolOr("normalized", !t.special));
    if (!IsValidUtf8(t.content)) return e.Invalid("\"content\" is not valid UTF-8");
    tokens.push_back(std::move(t));
  }
  return tokens;
}

// One past the largest id of the model and the added tokens.
int32_t IdLimit(const Pipeline& p, const std::vector<AddedToken>& added) {
  int32_t limit = p.model->id_limit();
  for (const AddedToken& t : added) limit = std::max(limit, t.id + 1);
  return limit;
}

Status LoadStages(const JsonSection& top, Pipeline* p) {
  for (const char* key : {"truncation", "padding"}) {
    if (!top.Member(key).IsNull()) {
      return top.Member(key).Unsupported("truncation and padding are not supported");
    }
  }
  const JsonSection model = top.Member("model");
  if (!model.json().is_object()) return model.Invalid("missing model");
  KVF_ASSIGN_OR_RETURN(std::string type, model.StringOr("type", "BPE"));
  if (type != "BPE") return model.Unsupported(fmt::format("unsupported model type \"{}\"", type));
  KVF_ASSIGN_OR_RETURN(p->model, BpeModel::FromJson(model));
  if (!top.Member("normalizer").IsNull()) {
    KVF_ASSIGN_OR_RETURN(p->normalizer, NormalizerFromJson(top.Member("normalizer")));
  }
  if (!top.Member("pre_tokenizer").IsNull()) {
    KVF_ASSIGN_OR_RETURN(p->pre_tokenizer, PreTokenizerFromJson(top.Member("pre_tokenizer")));
  }
  if (!top.Member("decoder").IsNull()) {
    KVF_ASSIGN_OR_RETURN(p->decoder, DecoderFromJson(top.Member("decoder")));
  }
  KVF_ASSIGN_OR_RETURN(std::vector<AddedToken> added, AddedTokensFromJson(top));
  if (!top.Member("post_processor").IsNull()) {
    KVF_ASSIGN_OR_RETURN(p->post_processor,
                         PostProcessorFromJson(top.Member("post_processor"), IdLimit(*p, added)));
  }
  StatusOr<AddedVocabulary> vocab =
      AddedVocabulary::Create(std::move(added), p->normalizer.get(), false);
  if (!vocab.ok()) return top.Member("added_tokens").Invalid(vocab.status().message());
  p->added = std::move(vocab).value();
  return Status::Ok();
}

// A special token in tokenizer_config.json: a string, or an object with its "content".
StatusOr<std::string> TokenString(const JsonSection& e) {
  if (e.IsNull()) return std::string();
  if (e.json().is_string()) return e.json().get<std::string>();
  if (e.json().is_object()) return e.String("content");
  return e.Invalid("must be a string or an object with \"content\"");
}

StatusOr<std::optional<int32_t>> ResolveId(const JsonSection& e, const std::string& token,
                                           const Pipeline& p) {
  if (token.empty()) return std::optional<int32_t>();
  if (const AddedToken* t = p.added.FindContent(token)) return std::optional<int32_t>(t->id);
  if (std::optional<int32_t> id = p.model->TokenToId(token)) return id;
  return e.Invalid(fmt::format("\"{}\" is not a token of tokenizer.json", token));
}

StatusOr<std::string> ChatTemplate(const JsonSection& config) {
  const JsonSection t = config.Member("chat_template");
  if (t.IsNull()) return std::string();
  if (t.json().is_string()) return t.json().get<std::string>();
  if (!t.json().is_array()) return t.Invalid("must be a string or a list of {name, template}");
  for (size_t i = 0; i < t.json().size(); ++i) {
    KVF_ASSIGN_OR_RETURN(std::string name, t.Element(i).String("name"));
    if (name == "default") return t.Element(i).String("template");
  }
  return std::string();
}

Status LoadConfig(const nlohmann::json& config, Pipeline* p) {
  const JsonSection c(config, kConfigFile, "");
  SpecialTokens& s = p->special_strings;
  std::optional<int32_t> eos;
  struct Field {
    const char* key;
    std::string* text;
    std::optional<int32_t>* id;
  };
  for (const Field& f :
       {Field{"bos_token", &s.bos, &p->bos_id}, Field{"eos_token", &s.eos, &eos},
        Field{"unk_token", &s.unk, &p->unk_id}, Field{"pad_token", &s.pad, &p->pad_id}}) {
    KVF_ASSIGN_OR_RETURN(*f.text, TokenString(c.Member(f.key)));
    KVF_ASSIGN_OR_RETURN(*f.id, ResolveId(c.Member(f.key), *f.text, *p));
  }
  if (eos) p->eos_ids.push_back(*eos);
  const JsonSection extra = c.Member("additional_special_tokens");
  if (!extra.IsNull()) {
    if (!extra.json().is_array()) return extra.Invalid("must be an array");
    for (size_t i = 0; i < extra.json().size(); ++i) {
      KVF_ASSIGN_OR_RETURN(std::string token, TokenString(extra.Element(i)));
      s.additional.push_back(std::move(token));
    }
  }
  KVF_ASSIGN_OR_RETURN(p->chat_template, ChatTemplate(c));
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("cannot read {}", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::FromHuggingFaceJson(std::string_view tokenizer_json,
                                                   std::string_view tokenizer_config_json) {
  KVF_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(tokenizer_json, kJsonFile));
  auto p = std::make_unique<Pipeline>();
  KVF_RETURN_IF_ERROR(LoadStages(JsonSection(j, kJsonFile, ""), p.get()));
  if (!tokenizer_config_json.empty()) {
    KVF_ASSIGN_OR_RETURN(nlohmann::json config, ParseObject(tokenizer_config_json, kConfigFile));
    KVF_RETURN_IF_ERROR(LoadConfig(config, p.get()));
  }
  return Assemble(std::move(p));
}

StatusOr<Tokenizer> Tokenizer::FromHuggingFaceFiles(
    const std::filesystem::path& tokenizer_json,
    const std::filesystem::path& tokenizer_config_json) {
  KVF_ASSIGN_OR_RETURN(std::string json, ReadFile(tokenizer_json));
  std::string config;
  if (!tokenizer_config_json.empty()) {
    KVF_ASSIGN_OR_RETURN(config, ReadFile(tokenizer_config_json));
  }
  return FromHuggingFaceJson(json, config);
}

}  // namespace kvferry::tokenizer
