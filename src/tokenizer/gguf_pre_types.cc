#include "tokenizer/gguf_pre_types.h"

#include "tokenizer/pre_tokenizers.h"

namespace kvferry::tokenizer {
namespace {

const std::vector<GgufPreType>& Table() {
  static const std::vector<GgufPreType> table = {
      {"llama-bpe",
       {"llama3", "llama-v3"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       /*ignore_merges=*/true,
       /*add_bos=*/true,
       /*nfc=*/false},
      {"qwen2",
       {"deepseek-r1-qwen"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false,
       false,
       true},
      {"gpt-2", {"gpt2"}, {kGpt2WordRegex}, false, false, false},
      {"default",
       {""},
       {R"([\p{P}\$\+<=>\^~\|]+)",
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))", R"(\p{N}+)",
        R"([0-9][0-9][0-9])"},
       false,
       false,
       false},
  };
  return table;
}

}  // namespace

const GgufPreType* FindGgufPreType(std::string_view name) {
  for (const GgufPreType& t : Table()) {
    if (t.name == name) return &t;
    for (const std::string& a : t.aliases) {
      if (a == name) return &t;
    }
  }
  return nullptr;
}

const GgufPreType* FindGgufPreTypeByRegexes(const std::vector<std::string>& regexes) {
  for (const GgufPreType& t : Table()) {
    if (t.regexes == regexes) return &t;
  }
  return nullptr;
}

std::string GgufPreTypeNames() {
  std::string names;
  for (const GgufPreType& t : Table()) {
    names += (names.empty() ? "" : ", ") + t.name;
    for (const std::string& a : t.aliases) {
      if (!a.empty()) names += ", " + a;
    }
  }
  return names;
}

}  // namespace kvferry::tokenizer
