#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "kvferry/common/utf8.h"
#include "tokenizer/unicode.h"

namespace kvferry::tokenizer {
namespace {

// The code point that ends just before `pos` (pos > 0, valid UTF-8).
char32_t CodePointBefore(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return NextCodePoint(text, &start);
}

char32_t CodePointAt(std::string_view text, size_t pos) { return NextCodePoint(text, &pos); }

// Start of the run of whitespace that ends at `pos`.
size_t WhitespaceRunStart(std::string_view text, size_t pos) {
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!IsWhitespace(NextCodePoint(text, &probe))) break;
    pos = start;
  }
  return pos;
}

// End of the run of whitespace that starts at `pos`.
size_t WhitespaceRunEnd(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhitespace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

StatusOr<AddedVocabulary> AddedVocabulary::Create(std::vector<AddedToken> tokens,
                                                  const Normalizer* normalizer,
                                                  bool encode_special_tokens) {
  AddedVocabulary v;
  v.encode_special_tokens_ = encode_special_tokens;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    if (!IsValidUtf8(t.content)) return InvalidArgumentError("added token is not valid UTF-8");
    v.by_id_[t.id] = i;  // a later entry for the same id or content wins
    v.by_content_[t.content] = i;
  }
  for (const auto& [content, i] : v.by_content_) {
    const AddedToken& t = v.tokens_[i];
    if (t.content.empty()) continue;  // an empty token matches nothing
    std::string pattern = t.content;
    if (t.normalized && normalizer != nullptr) {
      // The same growth bound as for text (tokenizer.cc): a hostile normalizer fails here too.
      KVF_RETURN_IF_ERROR(normalizer->Normalize(&pattern, 16 * pattern.size() + 65536));
      if (pattern.empty()) continue;
    }
    Matcher& m = t.normalized ? v.normalized_ : v.raw_;
    m.patterns.push_back(std::move(pattern));
    m.token_index.push_back(i);
  }
  for (Matcher* m : {&v.raw_, &v.normalized_}) {
    for (size_t k = 0; k < m->patterns.size(); ++k) {
      m->by_first_byte[static_cast<uint8_t>(m->patterns[k][0])].push_back(k);
    }
    for (auto& bucket : m->by_first_byte) {
      std::sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
        return m->patterns[a].size() != m->patterns[b].size()
                   ? m->patterns[a].size() > m->patterns[b].size()
                   : a < b;
      });
    }
  }
  return v;
}

int AddedVocabulary::LongestAt(const Matcher& m, std::string_view text, size_t pos) {
  for (size_t k : m.by_first_byte[static_cast<uint8_t>(text[pos])]) {
    if (text.compare(pos, m.patterns[k].size(), m.patterns[k]) == 0) return static_cast<int>(k);
  }
  return -1;
}

std::vector<AddedVocabulary::Piece> AddedVocabulary::Split(std::string_view text,
                                                           bool normalized_kind) const {
  const Matcher& m = normalized_kind ? normalized_ : raw_;
  std::vector<Piece> pieces;
  size_t done = 0;  // end of the last piece emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const int k = m.patterns.empty() ? -1 : LongestAt(m, text, pos);
    if (k < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[m.token_index[static_cast<size_t>(k)]];
    size_t begin = pos, end = pos + m.patterns[static_cast<size_t>(k)].size();
    pos = end;  // like a match iterator, go on after the match even if it is rejected
    if (encode_special_tokens_ && t.special) continue;
    if (t.single_word && ((begin > 0 && IsWordChar(CodePointBefore(text, begin))) ||
                          (end < text.size() && IsWordChar(CodePointAt(text, end))))) {
      continue;
    }
    if (t.lstrip) begin = std::max(WhitespaceRunStart(text, begin), done);
    if (t.rstrip) end = WhitespaceRunEnd(text, end);
    begin = std::max(begin, done);
    if (done < begin) pieces.push_back({done, begin, -1});
    pieces.push_back({begin, end, t.id});
    done = end;
  }
  if (done < text.size() || pieces.empty()) pieces.push_back({done, text.size(), -1});
  return pieces;
}

const AddedToken* AddedVocabulary::FindId(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindContent(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace kvferry::tokenizer
