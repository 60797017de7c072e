// Tokenizer::FromGguf: the Hugging Face pipeline equivalent to a GGUF file's tokenizer, so that a
// GGUF model and its original tokenizer.json encode alike.
//
//   "gpt2"  : [NFC for qwen2] -> Split(pre type regexes) + ByteLevel -> BPE(merges) -> ByteLevel
//   "llama" : Prepend("▁") + Replace(" ", "▁") -> BPE(merges, byte_fallback, unk) ->
//             Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0)
//
// Tokens of type control and unknown become special added tokens, user-defined ones plain added
// tokens (matched in the text before the model), as llama.cpp does when it parses specials.
// Qwen2's NFC is applied although llama.cpp skips it: the model was trained with it.
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "kvferry/common/utf8.h"
#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/gguf_pre_types.h"
#include "tokenizer/pipeline.h"

namespace kvferry::tokenizer {
namespace {

Status Invalid(std::string_view what) {
  return InvalidArgumentError(fmt::format("gguf tokenizer: {}", what));
}

GgufTokenType TypeOf(const GgufTokenizerMetadata& m, size_t id) {
  return m.token_types.empty() ? GgufTokenType::kNormal
                               : static_cast<GgufTokenType>(m.token_types[id]);
}

std::string TokenAt(const GgufTokenizerMetadata& m, size_t id) {
  // An empty token cannot be looked up; llama.cpp renames it the same way.
  return m.tokens[id].empty() ? fmt::format("[EMPTY_{}]", id) : m.tokens[id];
}

Status CheckShape(const GgufTokenizerMetadata& m) {
  if (m.tokens.empty()) return Invalid("tokenizer.ggml.tokens is empty");
  if (m.tokens.size() > (1u << 24)) return Invalid("tokenizer.ggml.tokens is too large");
  if (!m.token_types.empty() && m.token_types.size() < m.tokens.size()) {
    return Invalid("tokenizer.ggml.token_type is shorter than the tokens");
  }
  if (!m.scores.empty() && m.scores.size() < m.tokens.size()) {
    return Invalid("tokenizer.ggml.scores is shorter than the tokens");
  }
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    if (!IsValidUtf8(m.tokens[i])) return Invalid(fmt::format("tokens[{}] is not UTF-8", i));
  }
  return Status::Ok();
}

StatusOr<Vocab> VocabOf(const GgufTokenizerMetadata& m) {
  Vocab vocab;
  vocab.reserve(m.tokens.size());
  for (size_t id = 0; id < m.tokens.size(); ++id) {
    if (!vocab.emplace(TokenAt(m, id), static_cast<int32_t>(id)).second) {
      return Invalid(fmt::format("duplicate token \"{}\" (id {})", m.tokens[id], id));
    }
  }
  return vocab;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> MergesOf(
    const GgufTokenizerMetadata& m) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.merges.size());
  for (size_t i = 0; i < m.merges.size(); ++i) {
    const std::string& line = m.merges[i];
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string::npos ||
        line.find(' ', space + 1) != std::string::npos) {
      return Invalid(fmt::format("merges[{}] is not two tokens separated by one space", i));
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

// SentencePiece merges implied by the scores, as transformers' SentencePieceExtractor derives
// them: every split of a normal token into two tokens of the vocabulary, by the token's score
// (highest first), then by the ids of the token, the left and the right part.
std::vector<std::pair<std::string, std::string>> MergesFromScores(const GgufTokenizerMetadata& m,
                                                                  const Vocab& vocab) {
  struct Candidate {
    float score;
    int32_t id, left, right;
  };
  std::vector<Candidate> found;
  for (size_t id = 0; id < m.tokens.size(); ++id) {
    if (TypeOf(m, id) != GgufTokenType::kNormal) continue;
    const std::string t = TokenAt(m, id);
    for (size_t k = SequenceLength(static_cast<unsigned char>(t[0])); k < t.size();
         k += SequenceLength(static_cast<unsigned char>(t[k]))) {
      auto l = vocab.find(std::string_view(t).substr(0, k));
      auto r = vocab.find(std::string_view(t).substr(k));
      if (l != vocab.end() && r != vocab.end()) {
        found.push_back({m.scores[id], static_cast<int32_t>(id), l->second, r->second});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(b.score, a.id, a.left, a.right) < std::tie(a.score, b.id, b.left, b.right);
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(found.size());
  for (const Candidate& c : found) {
    merges.emplace_back(TokenAt(m, static_cast<size_t>(c.left)),
                        TokenAt(m, static_cast<size_t>(c.right)));
  }
  return merges;
}

StatusOr<AddedVocabulary> AddedOf(const GgufTokenizerMetadata& m) {
  std::vector<AddedToken> added;
  for (size_t id = 0; id < m.tokens.size(); ++id) {
    const GgufTokenType type = TypeOf(m, id);
    if (type != GgufTokenType::kControl && type != GgufTokenType::kUnknown &&
        type != GgufTokenType::kUserDefined) {
      continue;
    }
    added.push_back(AddedToken{TokenAt(m, id), static_cast<int32_t>(id), false, false, false, false,
                               type != GgufTokenType::kUserDefined});
  }
  return AddedVocabulary::Create(std::move(added), nullptr, false);
}

Status BuildGpt2(const GgufTokenizerMetadata& m, Vocab vocab, Pipeline* p, bool* add_bos) {
  const GgufPreType* pre = FindGgufPreType(m.pre);
  if (pre == nullptr) {
    return UnimplementedError(
        fmt::format("gguf tokenizer: tokenizer.ggml.pre \"{}\" is not "
                    "supported (supported: {})",
                    m.pre, GgufPreTypeNames()));
  }
  if (pre->nfc) p->normalizer = MakeUnicodeNormalizer(NormalizationForm::kNfc);
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (const std::string& regex : pre->regexes) {
    KVF_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromRegex(regex));
    steps.push_back(MakeSplitPreTokenizer(std::move(pattern), SplitBehavior::kIsolated, false));
  }
  steps.push_back(MakeByteLevelPreTokenizer(/*add_prefix_space=*/false, /*use_regex=*/false));
  p->pre_tokenizer = MakeSequencePreTokenizer(std::move(steps));
  KVF_ASSIGN_OR_RETURN(auto merges, MergesOf(m));
  BpeOptions options;
  options.ignore_merges = pre->ignore_merges;
  KVF_ASSIGN_OR_RETURN(
      p->model, BpeModel::Create(std::move(vocab), merges, std::move(options), "gguf tokenizer"));
  p->decoder = MakeByteLevelDecoder();
  *add_bos = m.add_bos_token.value_or(pre->add_bos);
  return Status::Ok();
}

Status BuildLlama(const GgufTokenizerMetadata& m, Vocab vocab, Pipeline* p, bool* add_bos) {
  const bool prefix = m.add_space_prefix.value_or(true);
  KVF_ASSIGN_OR_RETURN(Pattern space, Pattern::FromString(" "));
  std::vector<std::unique_ptr<Normalizer>> norm;
  if (prefix) norm.push_back(MakePrependNormalizer("\xE2\x96\x81"));
  norm.push_back(MakeReplaceNormalizer(std::move(space), "\xE2\x96\x81"));
  p->normalizer = MakeSequenceNormalizer(std::move(norm));
  std::vector<std::pair<std::string, std::string>> merges;
  if (!m.merges.empty()) {
    KVF_ASSIGN_OR_RETURN(merges, MergesOf(m));
  } else if (!m.scores.empty()) {
    merges = MergesFromScores(m, vocab);
  }
  BpeOptions options;
  options.byte_fallback = true;
  options.fuse_unk = true;
  if (p->unk_id) options.unk_token = TokenAt(m, static_cast<size_t>(*p->unk_id));
  KVF_ASSIGN_OR_RETURN(
      p->model, BpeModel::Create(std::move(vocab), merges, std::move(options), "gguf tokenizer"));
  std::vector<std::unique_ptr<Decoder>> dec;
  dec.push_back(MakeReplaceDecoder("\xE2\x96\x81", " "));
  dec.push_back(MakeByteFallbackDecoder());
  dec.push_back(MakeFuseDecoder());
  if (prefix) dec.push_back(MakeStripDecoder(" ", 1, 0));
  p->decoder = MakeSequenceDecoder(std::move(dec));
  *add_bos = m.add_bos_token.value_or(true);
  return Status::Ok();
}

Status SetSpecialIds(const GgufTokenizerMetadata& m, Pipeline* p) {
  const int64_t n = static_cast<int64_t>(m.tokens.size());
  for (const std::optional<int32_t>& id : {m.bos_token_id, m.eos_token_id, m.eot_token_id,
                                           m.eom_token_id, m.unk_token_id, m.pad_token_id}) {
    if (id && (*id < 0 || *id >= n))
      return Invalid(fmt::format("special token id {} out of range", *id));
  }
  // llama.cpp's defaults for SentencePiece vocabularies.
  const bool spm = m.model == "llama";
  auto fallback = [&](std::optional<int32_t> id, int32_t def) -> std::optional<int32_t> {
    if (id || !spm || def >= n) return id;
    return def;
  };
  p->bos_id = fallback(m.bos_token_id, 1);
  p->unk_id = fallback(m.unk_token_id, 0);
  p->pad_id = m.pad_token_id;
  for (const std::optional<int32_t>& id :
       {fallback(m.eos_token_id, 2), m.eot_token_id, m.eom_token_id}) {
    if (id && std::find(p->eos_ids.begin(), p->eos_ids.end(), *id) == p->eos_ids.end()) {
      p->eos_ids.push_back(*id);
    }
  }
  auto text = [&](const std::optional<int32_t>& id) {
    return id ? TokenAt(m, static_cast<size_t>(*id)) : std::string();
  };
  p->special_strings = SpecialTokens{text(p->bos_id),
                                     p->eos_ids.empty() ? "" : TokenAt(m, p->eos_ids[0]),
                                     text(p->unk_id),
                                     text(p->pad_id),
                                     {}};
  return Status::Ok();
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::FromGguf(const GgufTokenizerMetadata& m) {
  KVF_RETURN_IF_ERROR(CheckShape(m));
  auto p = std::make_unique<Pipeline>();
  KVF_RETURN_IF_ERROR(SetSpecialIds(m, p.get()));
  KVF_ASSIGN_OR_RETURN(Vocab vocab, VocabOf(m));
  bool add_bos = false;
  if (m.model == "gpt2") {
    KVF_RETURN_IF_ERROR(BuildGpt2(m, std::move(vocab), p.get(), &add_bos));
  } else if (m.model == "llama") {
    KVF_RETURN_IF_ERROR(BuildLlama(m, std::move(vocab), p.get(), &add_bos));
  } else {
    return UnimplementedError(fmt::format(
        "gguf tokenizer: tokenizer.ggml.model \"{}\" is not supported (supported: gpt2, llama)",
        m.model));
  }
  KVF_ASSIGN_OR_RETURN(p->added, AddedOf(m));
  if (add_bos && !p->bos_id) return Invalid("add_bos_token is set but there is no bos token");
  const bool add_eos = m.add_eos_token.value_or(false);
  if (add_eos && p->eos_ids.empty()) return Invalid("add_eos_token is set but there is no eos");
  std::vector<int32_t> prefix, suffix;
  if (add_bos) prefix.push_back(*p->bos_id);
  if (add_eos) suffix.push_back(p->eos_ids[0]);
  p->post_processor = MakeTemplateProcessor(std::move(prefix), std::move(suffix));
  p->chat_template = m.chat_template;
  return Assemble(std::move(p));
}

}  // namespace kvferry::tokenizer
