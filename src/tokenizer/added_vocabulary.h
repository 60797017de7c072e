// Added tokens: tokens matched in the input text before the normalizer and the model see it,
// so that "<|im_start|>" becomes its own id instead of being split into characters (Hugging
// Face's AddedVocabulary). Tokens with normalized=false are matched in the raw text; the others
// in each normalized piece, by their normalized form. Matching is leftmost-longest; lstrip and
// rstrip take the whitespace beside a match into it, single_word accepts a match only between
// non-word characters. With encode_special_tokens, special tokens are not matched (their text
// is tokenized as ordinary text), as tokenizers' encode_special_tokens option.
//
// Internal to src/tokenizer. Thread-safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvferry/common/status.h"
#include "tokenizer/normalizers.h"

namespace kvferry::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

class AddedVocabulary {
 public:
  // A slice [begin, end) of the text: an added token's id, or -1 for text between tokens.
  struct Piece {
    size_t begin;
    size_t end;
    int32_t id;
  };

  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the normalized form of tokens with normalized=true.
  static StatusOr<AddedVocabulary> Create(std::vector<AddedToken> tokens,
                                          const Normalizer* normalizer, bool encode_special_tokens);

  // Pieces covering `text` in order, splitting at the tokens of one kind: normalized=false
  // (matched in raw text) or normalized=true (matched in normalized text).
  std::vector<Piece> Split(std::string_view text, bool normalized_kind) const;

  // The token with this id or content, or null.
  const AddedToken* FindId(int32_t id) const;
  const AddedToken* FindContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Tokens of one kind by the first byte of the text they match, longest first.
  struct Matcher {
    std::vector<std::string> patterns;  // parallel to token_index
    std::vector<size_t> token_index;
    std::array<std::vector<size_t>, 256> by_first_byte;  // indices into patterns
  };

  // The longest match at `pos`: its index into `m.patterns`, or -1.
  static int LongestAt(const Matcher& m, std::string_view text, size_t pos);

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_, normalized_;
  bool encode_special_tokens_ = false;
};

}  // namespace kvferry::tokenizer
