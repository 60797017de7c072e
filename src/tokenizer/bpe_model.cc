#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {
namespace {

// Words shorter than this are cached, up to this many (as Hugging Face's BPE cache).
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kCacheCapacity = 10000;

std::string ByteTokenName(uint8_t b) { return fmt::format("<0x{:02X}>", b); }

}  // namespace

BpeModel::BpeModel(Vocab vocab, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int32_t limit = 0;
  for (const auto& [token, id] : vocab_) limit = std::max(limit, id + 1);
  id_to_token_.assign(static_cast<size_t>(limit), nullptr);
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = &token;
  if (options_.unk_token) unk_id_ = TokenToId(*options_.unk_token);
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = TokenToId(ByteTokenName(static_cast<uint8_t>(b))).value_or(-1);
  }
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
    std::string_view where) {
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0)
      return InvalidArgumentError(fmt::format("{}: negative id for \"{}\"", where, token));
    max_id = std::max<int64_t>(max_id, id);
  }
  if (max_id >= 2 * static_cast<int64_t>(vocab.size()) + 65536) {
    return InvalidArgumentError(fmt::format("{}: ids are too sparse (max id {} for {} tokens)",
                                            where, max_id, vocab.size()));
  }
  std::unique_ptr<BpeModel> m(new BpeModel(std::move(vocab), std::move(options)));
  const std::string& prefix = m->options_.continuing_subword_prefix;
  m->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::optional<int32_t> a_id = m->TokenToId(a), b_id = m->TokenToId(b);
    const bool b_has_prefix = b.compare(0, prefix.size(), prefix) == 0;
    const std::optional<int32_t> new_id =
        b_has_prefix ? m->TokenToId(a + b.substr(prefix.size())) : std::nullopt;
    if (!a_id || !b_id || !new_id) {
      return InvalidArgumentError(
          fmt::format("{}: merges[{}] \"{} {}\": a token is not in the vocab", where, rank, a, b));
    }
    // A pair listed twice keeps its last rank, as in tokenizers.
    m->merges_[PairKey(*a_id, *b_id)] = Merge{static_cast<int32_t>(rank), *new_id};
  }
  return m;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  return id_to_token_[static_cast<size_t>(id)];
}

Status BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  const bool affixes =
      !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  std::optional<int32_t> pending_unk;
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    i += SequenceLength(static_cast<unsigned char>(word[i]));
    std::string_view ch = word.substr(begin, i - begin);
    std::string decorated;
    if (affixes) {
      decorated = std::string(begin > 0 ? options_.continuing_subword_prefix : "") +
                  std::string(ch) + (i == word.size() ? options_.end_of_word_suffix : "");
      ch = decorated;
    }
    if (std::optional<int32_t> id = TokenToId(ch)) {
      if (pending_unk) symbols->push_back(*std::exchange(pending_unk, std::nullopt));
      symbols->push_back(*id);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[uint8_t(c)] >= 0; })) {
      if (pending_unk) symbols->push_back(*std::exchange(pending_unk, std::nullopt));
      for (char c : ch) symbols->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (!options_.unk_token) continue;  // no unknown token: the character is dropped
    if (!unk_id_) {
      return InvalidArgumentError(
          fmt::format("BPE: unk_token \"{}\" is not in the vocab", *options_.unk_token));
    }
    if (pending_unk && !options_.fuse_unk) symbols->push_back(*pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk) symbols->push_back(*pending_unk);
  return Status::Ok();
}

void BpeModel::MergeAll(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  std::vector<int32_t>& id = *symbols;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int k = 0; k < n; ++k) {
    prev[k] = k - 1;
    next[k] = k + 1 < n ? k + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(id[pos], id[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int right = alive[top.pos] ? next[top.pos] : -1;
    if (right < 0) continue;
    // Skip entries made stale by an earlier merge of either symbol.
    auto it = merges_.find(PairKey(id[top.pos], id[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    id[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  std::vector<int32_t> out;
  for (int k = n > 0 ? 0 : -1; k >= 0; k = next[k]) out.push_back(id[k]);
  *symbols = std::move(out);
}

Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return Status::Ok();
  if (options_.ignore_merges) {
    if (std::optional<int32_t> id = TokenToId(word)) {
      ids->push_back(*id);
      return Status::Ok();
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> symbols;
  KVF_RETURN_IF_ERROR(InitialSymbols(word, &symbols));
  MergeAll(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(symbols));
  }
  return Status::Ok();
}

}  // namespace kvferry::tokenizer

namespace kvferry::tokenizer {
namespace {

StatusOr<Vocab> VocabFromJson(const JsonSection& section) {
  const JsonSection v = section.Member("vocab");
  if (!v.json().is_object()) return v.Invalid("must be an object of token: id");
  Vocab vocab;
  vocab.reserve(v.json().size());
  for (const auto& [token, id] : v.json().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
      return v.Invalid(fmt::format("id of \"{}\" must be a non-negative integer", token));
    }
    if (!IsValidUtf8(token)) return v.Invalid("a token is not valid UTF-8");
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

// Merges as "a b" strings (before tokenizers 0.20) or ["a", "b"] pairs.
StatusOr<std::vector<std::pair<std::string, std::string>>> MergesFromJson(
    const JsonSection& section) {
  std::vector<std::pair<std::string, std::string>> merges;
  const JsonSection m = section.Member("merges");
  if (m.IsNull()) return merges;
  if (!m.json().is_array()) return m.Invalid("must be an array");
  merges.reserve(m.json().size());
  for (size_t i = 0; i < m.json().size(); ++i) {
    const nlohmann::json& e = m.json()[i];
    if (e.is_string()) {
      const std::string& line = e.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return m.Element(i).Invalid("a merge must be two tokens separated by one space");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return m.Element(i).Invalid("a merge must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

StatusOr<BpeOptions> OptionsFromJson(const JsonSection& section) {
  BpeOptions o;
  KVF_ASSIGN_OR_RETURN(std::string unk, section.StringOr("unk_token", ""));
  if (!section.Member("unk_token").IsNull()) o.unk_token = unk;
  KVF_ASSIGN_OR_RETURN(o.continuing_subword_prefix,
                       section.StringOr("continuing_subword_prefix", ""));
  KVF_ASSIGN_OR_RETURN(o.end_of_word_suffix, section.StringOr("end_of_word_suffix", ""));
  KVF_ASSIGN_OR_RETURN(o.fuse_unk, section.BoolOr("fuse_unk", false));
  KVF_ASSIGN_OR_RETURN(o.byte_fallback, section.BoolOr("byte_fallback", false));
  KVF_ASSIGN_OR_RETURN(o.ignore_merges, section.BoolOr("ignore_merges", false));
  const JsonSection dropout = section.Member("dropout");
  if (!dropout.IsNull()) {
    if (!dropout.json().is_number()) return dropout.Invalid("must be a number or null");
    // Dropout makes encoding random; serving needs it deterministic.
    if (dropout.json().get<double>() != 0.0)
      return dropout.Unsupported("BPE dropout is not supported");
  }
  return o;
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(Vocab vocab, VocabFromJson(section));
  KVF_ASSIGN_OR_RETURN(auto merges, MergesFromJson(section));
  KVF_ASSIGN_OR_RETURN(BpeOptions options, OptionsFromJson(section));
  return Create(std::move(vocab), merges, std::move(options), section.Where());
}

}  // namespace kvferry::tokenizer
