#include "tokenizer/pre_tokenizers.h"

#include <fmt/format.h>

#include "kvferry/common/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace kvferry::tokenizer {
namespace {

// Replaces each word by split(word), a StatusOr<std::vector<std::string>>; the first piece
// inherits the word's at_text_start.
template <typename SplitFn>
Status SplitEach(std::vector<PreToken>* words, size_t max_bytes, SplitFn split) {
  std::vector<PreToken> out;
  size_t total = 0;
  for (PreToken& w : *words) {
    KVF_ASSIGN_OR_RETURN(std::vector<std::string> pieces, split(w));
    bool first = true;
    for (std::string& p : pieces) {
      if (p.empty()) continue;
      total += p.size();
      if (total > max_bytes) return ResourceExhaustedError("pre-tokenizer: output too large");
      out.push_back({std::move(p), first && w.at_text_start});
      first = false;
    }
  }
  *words = std::move(out);
  return Status::Ok();
}

std::vector<std::string> ToStrings(const std::vector<std::string_view>& views) {
  return std::vector<std::string>(views.begin(), views.end());
}

class Split : public PreTokenizer {
 public:
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const override {
    return SplitEach(words, max_bytes,
                     [&](const PreToken& word) -> StatusOr<std::vector<std::string>> {
                       const std::string& w = word.text;
                       KVF_ASSIGN_OR_RETURN(std::vector<Span> spans, pattern_.FindMatches(w));
                       return ToStrings(SplitAtSpans(w, std::move(spans), behavior_, invert_));
                     });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Optionally splits with GPT-2's regex, then writes every byte as its byte-level character.
class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::optional<Pattern> words)
      : add_prefix_space_(add_prefix_space), words_(std::move(words)) {}
  Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const override {
    return SplitEach(
        words, max_bytes, [&](const PreToken& word) -> StatusOr<std::vector<std::string>> {
          const std::string& w = word.text;
          const std::string text = add_prefix_space_ && (w.empty() || w[0] != ' ') ? " " + w : w;
          std::vector<std::string_view> pieces{text};
          std::vector<Span> spans;
          if (words_) {
            KVF_ASSIGN_OR_RETURN(spans, words_->FindMatches(text));
            pieces = SplitAtSpans(text, std::move(spans), SplitBehavior::kIsolated, false);
          }
          std::vector<std::string> out(pieces.size());
          for (size_t i = 0; i < pieces.size(); ++i) AppendByteLevel(pieces[i], &out[i]);
          return out;
        });
  }

 private:
  bool add_prefix_space_;
  std::optional<Pattern> words_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Writes spaces as the replacement character ("▁"), prepends one per the scheme, and splits
// before each replacement character.
class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const override {
    return SplitEach(
        words, max_bytes, [&](const PreToken& word) -> StatusOr<std::vector<std::string>> {
          const std::string& w = word.text;
          const bool at_start = word.at_text_start;
          std::string text;
          for (char c : w) {
            if (c == ' ') {
              text.append(replacement_);
            } else {
              text.push_back(c);
            }
          }
          const bool prepend =
              scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start);
          if (prepend && text.compare(0, replacement_.size(), replacement_) != 0) {
            text.insert(0, replacement_);
          }
          if (!split_) return std::vector<std::string>{text};
          const char32_t mark = FirstChar(replacement_);
          return ToStrings(
              SplitAtSpans(text, FindCharMatches(text, [&](char32_t c) { return c == mark; }),
                           SplitBehavior::kMergedWithNext, false));
        });
  }

 private:
  static char32_t FirstChar(const std::string& s) {
    size_t i = 0;
    return NextCodePoint(s, &i);
  }

  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const override {
    return SplitEach(
        words, max_bytes, [&](const PreToken& word) -> StatusOr<std::vector<std::string>> {
          const std::string& w = word.text;
          return ToStrings(SplitAtSpans(
              w, FindCharMatches(w, IsNumeric),
              individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false));
        });
  }

 private:
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status PreTokenize(std::vector<PreToken>* words, size_t max_bytes) const override {
    for (const auto& step : steps_) KVF_RETURN_IF_ERROR(step->PreTokenize(words, max_bytes));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

StatusOr<std::unique_ptr<PreTokenizer>> SplitFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(section.Member("pattern")));
  KVF_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseSplitBehavior(section, "behavior"));
  KVF_ASSIGN_OR_RETURN(bool invert, section.BoolOr("invert", false));
  return MakeSplitPreTokenizer(std::move(pattern), behavior, invert);
}

StatusOr<std::unique_ptr<PreTokenizer>> ByteLevelFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(bool add_prefix_space, section.BoolOr("add_prefix_space", true));
  KVF_ASSIGN_OR_RETURN(bool use_regex, section.BoolOr("use_regex", true));
  return MakeByteLevelPreTokenizer(add_prefix_space, use_regex);
}

StatusOr<std::unique_ptr<PreTokenizer>> MetaspaceFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string replacement, section.String("replacement"));
  if (replacement.empty() || !IsValidUtf8(replacement) ||
      WellFormedLength(replacement, 0) != replacement.size()) {
    return section.Invalid("\"replacement\" must be one character");
  }
  KVF_ASSIGN_OR_RETURN(std::string scheme_name, section.StringOr("prepend_scheme", ""));
  KVF_ASSIGN_OR_RETURN(bool add_prefix_space, section.BoolOr("add_prefix_space", true));
  PrependScheme scheme = PrependScheme::kAlways;
  if (scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else if (scheme_name.empty()) {
    scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  } else if (scheme_name != "always") {
    return section.Invalid(fmt::format("unknown prepend_scheme \"{}\"", scheme_name));
  }
  if (!add_prefix_space && scheme != PrependScheme::kNever) {
    return section.Invalid("add_prefix_space false contradicts prepend_scheme");
  }
  KVF_ASSIGN_OR_RETURN(bool split, section.BoolOr("split", true));
  return std::unique_ptr<PreTokenizer>(new Metaspace(std::move(replacement), scheme, split));
}

StatusOr<std::unique_ptr<PreTokenizer>> SequencePreTokenizerFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(JsonSection list, section.Array("pretokenizers"));
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (size_t i = 0; i < list.json().size(); ++i) {
    KVF_ASSIGN_OR_RETURN(auto step, PreTokenizerFromJson(list.Element(i)));
    steps.push_back(std::move(step));
  }
  return MakeSequencePreTokenizer(std::move(steps));
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string type, section.Type());
  if (type == "Split") return SplitFromJson(section);
  if (type == "ByteLevel") return ByteLevelFromJson(section);
  if (type == "Metaspace") return MetaspaceFromJson(section);
  if (type == "Digits") {
    KVF_ASSIGN_OR_RETURN(bool individual, section.BoolOr("individual_digits", false));
    return std::unique_ptr<PreTokenizer>(new Digits(individual));
  }
  if (type == "Sequence") return SequencePreTokenizerFromJson(section);
  return section.Unsupported(fmt::format("unsupported pre_tokenizer type \"{}\"", type));
}

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(Pattern pattern, SplitBehavior behavior,
                                                    bool invert) {
  return std::make_unique<Split>(std::move(pattern), behavior, invert);
}

std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) {
  std::optional<Pattern> words;
  if (use_regex) {
    StatusOr<Pattern> p = Pattern::FromRegex(kGpt2WordRegex);
    words = std::move(p).value();  // a constant pattern: it compiles
  }
  return std::make_unique<ByteLevel>(add_prefix_space, std::move(words));
}

std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps) {
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

}  // namespace kvferry::tokenizer
