// The pre-tokenizers GGUF files name in tokenizer.ggml.pre, as Hugging Face pipeline pieces:
// the regexes the text is split at (each splitting the pieces of the one before, matches
// isolated, as llama.cpp's unicode_regex_split), whether whole words found in the vocabulary
// skip the merges, llama.cpp's default for add_bos_token, and whether the family's
// tokenizer.json normalizes to NFC first. The regexes are those of the families' tokenizer.json
// files, which llama.cpp's hand-adapted ones reproduce.
//
// Internal to src/tokenizer. Thread-safety: an immutable table.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvferry::tokenizer {

struct GgufPreType {
  std::string name;  // canonical tokenizer.ggml.pre value
  std::vector<std::string> aliases;
  std::vector<std::string> regexes;
  bool ignore_merges;
  bool add_bos;
  bool nfc;
};

// The entry for a tokenizer.ggml.pre value ("" means "default"), or null.
const GgufPreType* FindGgufPreType(std::string_view name);
// The entry whose regexes are exactly `regexes`, or null.
const GgufPreType* FindGgufPreTypeByRegexes(const std::vector<std::string>& regexes);
// "llama-bpe, qwen2, ..." for error messages.
std::string GgufPreTypeNames();

}  // namespace kvferry::tokenizer
