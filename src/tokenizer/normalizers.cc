#include "tokenizer/normalizers.h"

#include <fmt/format.h>

#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {
namespace {

Status CheckSize(const std::string& text, size_t max_bytes, std::string_view who) {
  if (text.size() > max_bytes) {
    return ResourceExhaustedError(fmt::format("normalizer {}: output too large", who));
  }
  return Status::Ok();
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    KVF_ASSIGN_OR_RETURN(*text, NormalizeUnicode(*text, form_));
    return CheckSize(*text, max_bytes, "Unicode");
  }

 private:
  NormalizationForm form_;
};

// Prepends a string to a non-empty text (SentencePiece's "▁" before the first word).
class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prepend) : prepend_(std::move(prepend)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    if (!text->empty()) text->insert(0, prepend_);
    return CheckSize(*text, max_bytes, "Prepend");
  }

 private:
  std::string prepend_;
};

class Replace : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    KVF_ASSIGN_OR_RETURN(*text, pattern_.ReplaceAll(*text, content_, max_bytes));
    return Status::Ok();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Lowercase : public Normalizer {
 public:
  Status Normalize(std::string* text, size_t max_bytes) const override {
    *text = ToLowerUnicode(*text);
    return CheckSize(*text, max_bytes, "Lowercase");
  }
};

// Removes White_Space characters from the start and/or the end.
class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text, size_t /*max_bytes*/) const override {
    size_t first = std::string::npos, last_end = 0;  // first non-space, end of the last one
    size_t i = 0;
    while (i < text->size()) {
      const size_t at = i;
      if (IsWhitespace(NextCodePoint(*text, &i))) continue;
      if (first == std::string::npos) first = at;
      last_end = i;
    }
    if (first == std::string::npos) {
      if (left_ || right_) text->clear();
      return Status::Ok();
    }
    const size_t begin = left_ ? first : 0;
    const size_t end = right_ ? last_end : text->size();
    *text = text->substr(begin, end - begin);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    for (const auto& step : steps_) KVF_RETURN_IF_ERROR(step->Normalize(text, max_bytes));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

StatusOr<std::unique_ptr<Normalizer>> SequenceNormalizerFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(JsonSection list, section.Array("normalizers"));
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (size_t i = 0; i < list.json().size(); ++i) {
    KVF_ASSIGN_OR_RETURN(auto step, NormalizerFromJson(list.Element(i)));
    steps.push_back(std::move(step));
  }
  return MakeSequenceNormalizer(std::move(steps));
}

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string type, section.Type());
  if (type == "NFC") return MakeUnicodeNormalizer(NormalizationForm::kNfc);
  if (type == "NFD") return MakeUnicodeNormalizer(NormalizationForm::kNfd);
  if (type == "NFKC") return MakeUnicodeNormalizer(NormalizationForm::kNfkc);
  if (type == "NFKD") return MakeUnicodeNormalizer(NormalizationForm::kNfkd);
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Prepend") {
    KVF_ASSIGN_OR_RETURN(std::string prepend, section.String("prepend"));
    if (!IsValidUtf8(prepend)) return section.Invalid("\"prepend\" is not valid UTF-8");
    return MakePrependNormalizer(std::move(prepend));
  }
  if (type == "Replace") {
    KVF_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(section.Member("pattern")));
    KVF_ASSIGN_OR_RETURN(std::string content, section.String("content"));
    if (!IsValidUtf8(content)) return section.Invalid("\"content\" is not valid UTF-8");
    return MakeReplaceNormalizer(std::move(pattern), std::move(content));
  }
  if (type == "Strip") {
    KVF_ASSIGN_OR_RETURN(bool left, section.BoolOr("strip_left", true));
    KVF_ASSIGN_OR_RETURN(bool right, section.BoolOr("strip_right", true));
    return std::unique_ptr<Normalizer>(new Strip(left, right));
  }
  if (type == "Sequence") return SequenceNormalizerFromJson(section);
  return section.Unsupported(fmt::format("unsupported normalizer type \"{}\"", type));
}

std::unique_ptr<Normalizer> MakeUnicodeNormalizer(NormalizationForm form) {
  return std::make_unique<UnicodeNormalizer>(form);
}
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prepend) {
  return std::make_unique<Prepend>(std::move(prepend));
}
std::unique_ptr<Normalizer> MakeReplaceNormalizer(Pattern pattern, std::string content) {
  return std::make_unique<Replace>(std::move(pattern), std::move(content));
}
std::unique_ptr<Normalizer> MakeSequenceNormalizer(
    std::vector<std::unique_ptr<Normalizer>> normalizers) {
  return std::make_unique<SequenceNormalizer>(std::move(normalizers));
}

}  // namespace kvferry::tokenizer
