#include "kvferry/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvferry/common/utf8.h"
#include "tokenizer/pipeline.h"

namespace kvferry::tokenizer {
namespace {

// How far the stages may grow a text (bytes): room for SentencePiece's "▁" (3 bytes per space)
// and byte-level characters (2 bytes per byte), not for a hostile file's blow-up.
size_t StageBudget(size_t text_bytes) { return 16 * text_bytes + 65536; }

// Tokenizes one piece of normalized text between added tokens.
Status EncodePiece(const Pipeline& p, std::string text, bool at_text_start, size_t budget,
                   std::vector<int32_t>* ids) {
  std::vector<PreToken> words;
  words.push_back({std::move(text), at_text_start});
  if (p.pre_tokenizer) KVF_RETURN_IF_ERROR(p.pre_tokenizer->PreTokenize(&words, budget));
  for (const PreToken& w : words) KVF_RETURN_IF_ERROR(p.model->Tokenize(w.text, ids));
  return Status::Ok();
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::Assemble(std::unique_ptr<Pipeline> p) {
  int32_t limit = p->model->id_limit();
  int64_t max_added = -1;
  for (const AddedToken& t : p->added.tokens()) max_added = std::max<int64_t>(max_added, t.id);
  if (max_added >= int64_t{limit} + 2 * int64_t(p->added.tokens().size()) + 65536) {
    return InvalidArgumentError(
        fmt::format("added token id {} is far beyond the vocab", max_added));
  }
  limit = std::max<int32_t>(limit, static_cast<int32_t>(max_added + 1));
  p->vocab_size = limit;
  p->is_special.assign(static_cast<size_t>(limit), false);
  for (const AddedToken& t : p->added.tokens())
    p->is_special[t.id] = p->is_special[t.id] || t.special;
  for (const std::optional<int32_t>& id : {p->bos_id, p->pad_id, p->unk_id}) {
    if (id && (*id < 0 || *id >= limit))
      return InvalidArgumentError("special token id out of range");
  }
  for (int32_t id : p->eos_ids) {
    if (id < 0 || id >= limit) return InvalidArgumentError("eos token id out of range");
  }
  // The configured bos/eos/unk/pad are special too (transformers' all_special_ids).
  for (const std::optional<int32_t>& id : {p->bos_id, p->pad_id, p->unk_id}) {
    if (id) p->is_special[*id] = true;
  }
  for (int32_t id : p->eos_ids) p->is_special[id] = true;
  for (int32_t id = 0; id < limit; ++id) {
    if (p->is_special[id]) p->special_ids.push_back(id);
  }
  if (p->post_processor && p->bos_id) {
    std::vector<int32_t> probe;
    p->post_processor->Process(&probe, /*add_special_tokens=*/true);
    p->add_bos = !probe.empty() && probe.front() == *p->bos_id;
  }
  return Tokenizer(std::shared_ptr<const Pipeline>(std::move(p)));
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  const Pipeline& p = *p_;
  if (!p.any_bytes) {
    const size_t bad = FirstInvalidOffset(text);
    if (bad != text.size()) {
      return InvalidArgumentError(fmt::format("text is not valid UTF-8 (byte {})", bad));
    }
  }
  const size_t budget = StageBudget(text.size());
  std::vector<int32_t> ids;
  for (const AddedVocabulary::Piece& raw : p.added.Split(text, /*normalized_kind=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string normalized(text.substr(raw.begin, raw.end - raw.begin));
    if (p.normalizer) KVF_RETURN_IF_ERROR(p.normalizer->Normalize(&normalized, budget));
    for (const AddedVocabulary::Piece& piece : p.added.Split(normalized, true)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
      } else if (piece.end > piece.begin) {
        KVF_RETURN_IF_ERROR(EncodePiece(p, normalized.substr(piece.begin, piece.end - piece.begin),
                                        raw.begin == 0 && piece.begin == 0, budget, &ids));
      }
    }
  }
  if (p.post_processor) p.post_processor->Process(&ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::DecodeBytesAt(std::span<const int32_t> ids, bool skip_special_tokens,
                                     bool at_start) const {
  const Pipeline& p = *p_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= p.vocab_size) continue;
    if (skip_special_tokens && p.is_special[id]) continue;
    std::optional<std::string> t = IdToToken(id);
    if (t) tokens.push_back(std::move(*t));
  }
  std::string out;
  if (p.decoder) {
    p.decoder->DecodeChain(&tokens, at_start);
    for (const std::string& t : tokens) out.append(t);
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) out.append(i == 0 ? "" : " ").append(tokens[i]);
  }
  return out;
}

std::string Tokenizer::DecodeBytes(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return DecodeBytesAt(ids, skip_special_tokens, /*at_start=*/true);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return ToValidUtf8(DecodeBytes(ids, skip_special_tokens));
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  const int32_t one[] = {id};
  return DecodeBytesAt(one, /*skip_special_tokens=*/false, /*at_start=*/false);
}

std::string Tokenizer::TokenText(int32_t id) const { return ToValidUtf8(TokenBytes(id)); }

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* t = p_->added.FindId(id)) return t->content;
  if (const std::string* t = p_->model->IdToToken(id)) return *t;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* t = p_->added.FindContent(token)) return t->id;
  return p_->model->TokenToId(token);
}

int32_t Tokenizer::vocab_size() const { return p_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return p_->bos_id; }
const std::vector<int32_t>& Tokenizer::eos_token_ids() const { return p_->eos_ids; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return p_->pad_id; }
std::optional<int32_t> Tokenizer::unk_token_id() const { return p_->unk_id; }
bool Tokenizer::add_bos() const { return p_->add_bos; }
bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < p_->vocab_size && p_->is_special[id];
}
const std::vector<int32_t>& Tokenizer::special_token_ids() const { return p_->special_ids; }
const SpecialTokens& Tokenizer::special_tokens() const { return p_->special_strings; }
const std::string& Tokenizer::chat_template() const { return p_->chat_template; }

}  // namespace kvferry::tokenizer
