#include "engine/model/gguf_tokenizer.h"

namespace kvferry::engine {
namespace {

using formats::GgufMetadata;
using formats::GgufValue;
using formats::GgufValueType;

Status OptionalId(const GgufMetadata& m, const char* key, std::optional<int32_t>* out) {
  if (m.Find(key) == nullptr) return Status::Ok();
  KVF_ASSIGN_OR_RETURN(int64_t v, m.GetInt(key));
  if (v < 0 || v > INT32_MAX) return InvalidArgumentError(std::string(key) + " is out of range");
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

Status OptionalBool(const GgufMetadata& m, const char* key, std::optional<bool>* out) {
  if (m.Find(key) == nullptr) return Status::Ok();
  KVF_ASSIGN_OR_RETURN(*out, m.GetBool(key));
  return Status::Ok();
}

Status Ids(const GgufMetadata& m, tokenizer::GgufTokenizerMetadata* t) {
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.bos_token_id", &t->bos_token_id));
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.eos_token_id", &t->eos_token_id));
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.eot_token_id", &t->eot_token_id));
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.eom_token_id", &t->eom_token_id));
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.unknown_token_id", &t->unk_token_id));
  KVF_RETURN_IF_ERROR(OptionalId(m, "tokenizer.ggml.padding_token_id", &t->pad_token_id));
  KVF_RETURN_IF_ERROR(OptionalBool(m, "tokenizer.ggml.add_bos_token", &t->add_bos_token));
  KVF_RETURN_IF_ERROR(OptionalBool(m, "tokenizer.ggml.add_eos_token", &t->add_eos_token));
  return OptionalBool(m, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
}

Status Lists(const GgufMetadata& m, tokenizer::GgufTokenizerMetadata* t) {
  KVF_ASSIGN_OR_RETURN(t->tokens, m.GetStringArray("tokenizer.ggml.tokens"));
  if (m.Find("tokenizer.ggml.merges") != nullptr) {
    KVF_ASSIGN_OR_RETURN(t->merges, m.GetStringArray("tokenizer.ggml.merges"));
  }
  if (m.Find("tokenizer.ggml.scores") != nullptr) {
    KVF_ASSIGN_OR_RETURN(std::vector<double> scores, m.GetFloatArray("tokenizer.ggml.scores"));
    t->scores.assign(scores.begin(), scores.end());
  }
  if (m.Find("tokenizer.ggml.token_type") != nullptr) {
    KVF_ASSIGN_OR_RETURN(std::vector<int64_t> types, m.GetIntArray("tokenizer.ggml.token_type"));
    t->token_types.assign(types.begin(), types.end());
  }
  return Status::Ok();
}

Status AddId(formats::GgufWriter* w, const char* key, const std::optional<int32_t>& id) {
  if (!id) return Status::Ok();
  return w->AddMetadata(key, GgufValue::Int(GgufValueType::kU32, *id));
}

Status AddBool(formats::GgufWriter* w, const char* key, const std::optional<bool>& v) {
  if (!v) return Status::Ok();
  return w->AddMetadata(key, GgufValue::Bool(*v));
}

}  // namespace

StatusOr<tokenizer::GgufTokenizerMetadata> ReadGgufTokenizer(const GgufMetadata& m) {
  tokenizer::GgufTokenizerMetadata t;
  KVF_ASSIGN_OR_RETURN(t.model, m.GetString("tokenizer.ggml.model"));
  if (m.Find("tokenizer.ggml.pre") != nullptr) {
    KVF_ASSIGN_OR_RETURN(t.pre, m.GetString("tokenizer.ggml.pre"));
  }
  KVF_RETURN_IF_ERROR(Lists(m, &t));
  KVF_RETURN_IF_ERROR(Ids(m, &t));
  if (m.Find("tokenizer.chat_template") != nullptr) {
    KVF_ASSIGN_OR_RETURN(t.chat_template, m.GetString("tokenizer.chat_template"));
  }
  return t;
}

Status AddGgufTokenizer(const tokenizer::GgufTokenizerMetadata& t, formats::GgufWriter* w) {
  KVF_RETURN_IF_ERROR(w->AddMetadata("tokenizer.ggml.model", GgufValue::String(t.model)));
  if (!t.pre.empty()) {
    KVF_RETURN_IF_ERROR(w->AddMetadata("tokenizer.ggml.pre", GgufValue::String(t.pre)));
  }
  KVF_RETURN_IF_ERROR(w->AddMetadata("tokenizer.ggml.tokens", GgufValue::StringArray(t.tokens)));
  if (!t.scores.empty()) {
    KVF_RETURN_IF_ERROR(w->AddMetadata(
        "tokenizer.ggml.scores",
        GgufValue::FloatArray(GgufValueType::kF32,
                              std::vector<double>(t.scores.begin(), t.scores.end()))));
  }
  if (!t.token_types.empty()) {
    KVF_RETURN_IF_ERROR(w->AddMetadata(
        "tokenizer.ggml.token_type",
        GgufValue::IntArray(GgufValueType::kI32,
                            std::vector<int64_t>(t.token_types.begin(), t.token_types.end()))));
  }
  if (!t.merges.empty()) {
    KVF_RETURN_IF_ERROR(w->AddMetadata("tokenizer.ggml.merges", GgufValue::StringArray(t.merges)));
  }
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.bos_token_id", t.bos_token_id));
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.eos_token_id", t.eos_token_id));
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.eot_token_id", t.eot_token_id));
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.eom_token_id", t.eom_token_id));
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.unknown_token_id", t.unk_token_id));
  KVF_RETURN_IF_ERROR(AddId(w, "tokenizer.ggml.padding_token_id", t.pad_token_id));
  KVF_RETURN_IF_ERROR(AddBool(w, "tokenizer.ggml.add_bos_token", t.add_bos_token));
  KVF_RETURN_IF_ERROR(AddBool(w, "tokenizer.ggml.add_eos_token", t.add_eos_token));
  KVF_RETURN_IF_ERROR(AddBool(w, "tokenizer.ggml.add_space_prefix", t.add_space_prefix));
  if (!t.chat_template.empty()) {
    KVF_RETURN_IF_ERROR(
        w->AddMetadata("tokenizer.chat_template", GgufValue::String(t.chat_template)));
  }
  return Status::Ok();
}

StatusOr<tokenizer::GgufTokenizerMetadata> GgufTokenizerFromHuggingFace(
    std::string_view tokenizer_json, std::string_view tokenizer_config, int32_t vocab_size) {
  KVF_ASSIGN_OR_RETURN(auto m, tokenizer::ExportGgufMetadata(tokenizer_json, tokenizer_config));
  for (auto id = static_cast<int32_t>(m.tokens.size()); id < vocab_size; ++id) {
    m.tokens.push_back("[PAD" + std::to_string(id) + "]");
    m.token_types.push_back(static_cast<int32_t>(tokenizer::GgufTokenType::kUnused));
    if (!m.scores.empty()) m.scores.push_back(-1000.0f);
  }
  return m;
}

}  // namespace kvferry::engine
