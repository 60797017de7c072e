// ExportGgufMetadata: the GGUF tokenizer metadata of a Hugging Face tokenizer.json, as llama.cpp's
// convert_hf_to_gguf.py writes it, for the pipelines Tokenizer::FromGguf rebuilds exactly:
//   byte-level BPE whose pre-tokenizer is one regex of the pre-type table (+ ByteLevel) -> "gpt2"
//   SentencePiece BPE (Prepend/Replace "▁" normalizer, byte fallback)                -> "llama"
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kvferry/tokenizer/gguf_metadata.h"
#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/gguf_pre_types.h"
#include "tokenizer/json_section.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"

namespace kvferry::tokenizer {
namespace {

using nlohmann::json;

constexpr const char* kSpace = "\xE2\x96\x81";  // "▁"

Status Unsupported(std::string_view what) {
  return UnimplementedError(fmt::format("GGUF export: {}", what));
}

// j[key], or null where j is not an object or lacks the key (const operator[] would assert).
const json& At(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

const json& Nth(const json& j, size_t index) {
  static const json null_value;
  return j.is_array() && index < j.size() ? j[index] : null_value;
}

bool IsType(const json& j, const char* type) {
  return j.is_object() && j.value("type", json()) == type;
}

// Whether `j` is a string pattern {"String": s}.
bool IsStringPattern(const json& j, const char* s) {
  return j.is_object() && j.size() == 1 && j.value("String", json()) == s;
}

// The regexes of a byte-level pre-tokenizer: Sequence[Split(Regex, Isolated), ByteLevel] or
// ByteLevel with GPT-2's regex; empty if it is neither.
std::vector<std::string> ByteLevelRegexes(const json& pre) {
  if (IsType(pre, "ByteLevel") && pre.value("use_regex", true) &&
      !pre.value("add_prefix_space", true)) {
    return {kGpt2WordRegex};
  }
  if (!IsType(pre, "Sequence")) return {};
  const json& steps = pre.value("pretokenizers", json::array());
  if (!steps.is_array() || steps.size() != 2) return {};
  const json& split = Nth(steps, 0);
  const json& bytes = Nth(steps, 1);
  const bool ok = IsType(split, "Split") && split.value("behavior", json()) == "Isolated" &&
                  !split.value("invert", false) && At(split, "pattern").is_object() &&
                  At(split, "pattern").value("Regex", json()).is_string() &&
                  IsType(bytes, "ByteLevel") && !bytes.value("use_regex", true) &&
                  !bytes.value("add_prefix_space", true);
  if (!ok) return {};
  return {At(At(split, "pattern"), "Regex").get<std::string>()};
}

Status DetectByteLevel(const json& j, GgufTokenizerMetadata* m) {
  const GgufPreType* pre = FindGgufPreTypeByRegexes(ByteLevelRegexes(At(j, "pre_tokenizer")));
  if (pre == nullptr) {
    return Unsupported(fmt::format("the pre_tokenizer matches no tokenizer.ggml.pre type ({})",
                                   GgufPreTypeNames()));
  }
  const json& norm = At(j, "normalizer");
  if (pre->nfc ? !IsType(norm, "NFC") : !norm.is_null()) {
    return Unsupported(
        fmt::format("pre type {} needs normalizer {}", pre->name, pre->nfc ? "NFC" : "null"));
  }
  const json& model = At(j, "model");
  if (model.value("ignore_merges", false) != pre->ignore_merges ||
      model.value("byte_fallback", false) || !IsType(At(j, "decoder"), "ByteLevel")) {
    return Unsupported(fmt::format("model or decoder differ from pre type {}", pre->name));
  }
  m->model = "gpt2";
  m->pre = pre->name;
  return Status::Ok();
}

Status DetectSentencePiece(const json& j, GgufTokenizerMetadata* m) {
  const json& norm = At(j, "normalizer");
  auto is_replace = [](const json& n) {
    return IsType(n, "Replace") && IsStringPattern(At(n, "pattern"), " ") &&
           n.value("content", json()) == kSpace;
  };
  bool prefix = false;
  if (IsType(norm, "Sequence") && At(norm, "normalizers").is_array() &&
      At(norm, "normalizers").size() == 2 && IsType(Nth(At(norm, "normalizers"), 0), "Prepend") &&
      Nth(At(norm, "normalizers"), 0).value("prepend", json()) == kSpace &&
      is_replace(Nth(At(norm, "normalizers"), 1))) {
    prefix = true;
  } else if (!is_replace(norm)) {
    return Unsupported("normalizer is not SentencePiece's Prepend(\"▁\") + Replace(\" \", \"▁\")");
  }
  const json& dec = At(j, "decoder");
  const json& steps = IsType(dec, "Sequence") ? At(dec, "decoders") : json();
  const bool dec_ok =
      steps.is_array() && steps.size() == (prefix ? 4u : 3u) && IsType(Nth(steps, 0), "Replace") &&
      IsStringPattern(At(Nth(steps, 0), "pattern"), kSpace) &&
      Nth(steps, 0).value("content", json()) == " " && IsType(Nth(steps, 1), "ByteFallback") &&
      IsType(Nth(steps, 2), "Fuse") &&
      (!prefix ||
       (IsType(Nth(steps, 3), "Strip") && Nth(steps, 3).value("content", json()) == " " &&
        Nth(steps, 3).value("start", json()) == 1 && Nth(steps, 3).value("stop", json()) == 0));
  if (!dec_ok) return Unsupported("decoder is not SentencePiece's Replace/ByteFallback/Fuse/Strip");
  if (!At(j, "model").value("byte_fallback", false))
    return Unsupported("model lacks byte_fallback");
  m->model = "llama";
  m->add_space_prefix = prefix;
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> MergePairs(const json& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& e : merges) {
    if (e.is_array()) {
      out.emplace_back(Nth(e, 0).get<std::string>(), Nth(e, 1).get<std::string>());
    } else if (e.get_ref<const std::string&>().rfind("#version", 0) != 0) {
      const std::string& s = e.get_ref<const std::string&>();
      out.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    }
  }
  return out;
}

bool IsByteToken(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(t[3]) &&
         std::isxdigit(t[4]);
}

void FillVocab(const Tokenizer& tok, const json& j, GgufTokenizerMetadata* m) {
  std::unordered_map<int32_t, bool> added;  // id -> special
  for (const json& a : j.value("added_tokens", json::array())) {
    added[At(a, "id").get<int32_t>()] = a.value("special", false);
  }
  const bool spm = m->model == "llama";
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    std::optional<std::string> t = tok.IdToToken(id);
    GgufTokenType type = GgufTokenType::kNormal;
    if (!t) {
      t = fmt::format("[PAD{}]", id);
      type = GgufTokenType::kUnused;
    } else if (auto it = added.find(id); it != added.end()) {
      type = !it->second                                   ? GgufTokenType::kUserDefined
             : spm && m->unk_token_id == std::optional(id) ? GgufTokenType::kUnknown
                                                           : GgufTokenType::kControl;
    } else if (spm && IsByteToken(*t)) {
      type = GgufTokenType::kByte;
    }
    m->tokens.push_back(std::move(*t));
    m->token_types.push_back(static_cast<int32_t>(type));
  }
}

// SentencePiece scores: -(rank of the first merge that makes a token); tokens no merge makes
// score below every merge.
void FillScores(const Tokenizer& tok,
                const std::vector<std::pair<std::string, std::string>>& merges,
                GgufTokenizerMetadata* m) {
  m->scores.assign(m->tokens.size(), -static_cast<float>(merges.size() + 1));
  for (size_t rank = merges.size(); rank-- > 0;) {
    if (std::optional<int32_t> id = tok.TokenToId(merges[rank].first + merges[rank].second)) {
      m->scores[static_cast<size_t>(*id)] = -static_cast<float>(rank);
    }
  }
}

// add_bos/add_eos from what the post-processor puts before and after a sequence (found with a
// sentinel id); without a tokenizer_config.json, those tokens are the bos and eos.
Status FillAddFlags(const Tokenizer& tok, const json& j, GgufTokenizerMetadata* m) {
  std::vector<int32_t> ids = {-1};
  if (!At(j, "post_processor").is_null()) {
    KVF_ASSIGN_OR_RETURN(
        auto post, PostProcessorFromJson(
                       JsonSection(At(j, "post_processor"), "tokenizer.json", "post_processor"),
                       tok.vocab_size()));
    post->Process(&ids, /*add_special_tokens=*/true);
  }
  const auto sentinel = std::find(ids.begin(), ids.end(), -1);
  const std::vector<int32_t> prefix(ids.begin(), sentinel), suffix(sentinel + 1, ids.end());
  auto take = [](const std::vector<int32_t>& added, std::optional<int32_t>* id) {
    if (added.empty()) return true;
    if (added.size() > 1 || (*id && **id != added[0])) return false;
    *id = added[0];
    return true;
  };
  if (!take(prefix, &m->bos_token_id) || !take(suffix, &m->eos_token_id)) {
    return Unsupported("the post_processor adds tokens other than one bos and one eos");
  }
  m->add_bos_token = !prefix.empty();
  m->add_eos_token = !suffix.empty();
  return Status::Ok();
}

}  // namespace

StatusOr<GgufTokenizerMetadata> ExportGgufMetadata(std::string_view tokenizer_json,
                                                   std::string_view tokenizer_config_json) {
  KVF_ASSIGN_OR_RETURN(Tokenizer tok,
                       Tokenizer::FromHuggingFaceJson(tokenizer_json, tokenizer_config_json));
  const json j = json::parse(tokenizer_json, nullptr, false);  // valid: it loaded
  GgufTokenizerMetadata m;
  if (At(j, "pre_tokenizer").is_null()) {
    KVF_RETURN_IF_ERROR(DetectSentencePiece(j, &m));
  } else {
    KVF_RETURN_IF_ERROR(DetectByteLevel(j, &m));
  }
  m.bos_token_id = tok.bos_token_id();
  if (!tok.eos_token_ids().empty()) m.eos_token_id = tok.eos_token_ids()[0];
  m.unk_token_id = tok.unk_token_id();
  if (!m.unk_token_id && At(At(j, "model"), "unk_token").is_string()) {
    m.unk_token_id = tok.TokenToId(At(At(j, "model"), "unk_token").get<std::string>());
  }
  m.pad_token_id = tok.pad_token_id();
  FillVocab(tok, j, &m);
  const auto merges = MergePairs(At(j, "model").value("merges", json::array()));
  for (const auto& [a, b] : merges) {
    if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
      return Unsupported("a merge has a token with a space, which \"a b\" cannot hold");
    }
    m.merges.push_back(fmt::format("{} {}", a, b));
  }
  if (m.model == "llama") FillScores(tok, merges, &m);
  KVF_RETURN_IF_ERROR(FillAddFlags(tok, j, &m));
  m.chat_template = tok.chat_template();
  return m;
}

}  // namespace kvferry::tokenizer
