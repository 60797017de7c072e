// The BPE model: byte-pair encoding of one word by a vocabulary and a ranked list of merges, as
// Hugging Face's models::bpe does it. The word starts as one symbol per character (characters
// missing from the vocabulary become <0xNN> byte tokens with byte_fallback, else the unknown
// token, fused when fuse_unk); then the adjacent pair of lowest merge rank is merged, leftmost
// first, until no pair has a merge. ignore_merges takes a word that is itself in the
// vocabulary as one token (Llama 3). Results for short words are cached.
//
// Cost: O(n log n) in the characters of a word (a heap of candidate merges over a linked list),
// so a 100 KB word without spaces is fine.
//
// Internal to src/tokenizer. Thread-safety: Tokenize and the lookups may be called from any
// thread; the cache is guarded by a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "tokenizer/json_section.h"

namespace kvferry::tokenizer {

// Hash for std::string keys that also accepts std::string_view lookups.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // before every character but a word's first
  std::string end_of_word_suffix;         // after a word's last character
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `merges` in rank order; both halves and their concatenation must be in `vocab`. Ids must be
  // non-negative and dense enough (max id < 2 * size + 65536) to index a table.
  static StatusOr<std::unique_ptr<BpeModel>> Create(
      Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options, std::string_view where);
  // From the "model" section of a tokenizer.json (type BPE).
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const JsonSection& section);

  // Appends the ids of `word` (valid UTF-8, non-empty).
  Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token of `id`, or null where the vocabulary has none.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  BpeModel(Vocab vocab, BpeOptions options);
  Status InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  void MergeAll(std::vector<int32_t>* symbols) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  Vocab vocab_;
  std::vector<const std::string*> id_to_token_;  // into vocab_'s keys
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];  // <0xNN> token ids, -1 where absent

  mutable Mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_
      GUARDED_BY(cache_mu_);
};

}  // namespace kvferry::tokenizer
