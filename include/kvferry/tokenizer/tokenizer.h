// Tokenizer: text <-> token ids for a model, the one class the engine and server use.
//
// Built from a Hugging Face tokenizer.json (+ tokenizer_config.json), from GGUF tokenizer
// metadata, or as kvferry's built-in byte-level vocabulary. It runs Hugging Face's pipeline:
//
//   added tokens -> normalizer -> pre-tokenizer -> model (BPE) -> post-processor   (Encode)
//   ids -> token strings -> decoder -> valid UTF-8                                 (Decode)
//
// each stage a small class built from its tokenizer.json section (docs/tokenizer.md lists the
// supported types; anything else is refused at load with an error naming section and type).
//
// Token strings (IdToToken) are those of the vocabulary: "Ġhello" in byte-level BPE, "▁hello"
// in SentencePiece; TokenText gives the text a token stands for. Ids are in [0, vocab_size());
// Decode skips ids outside the vocabulary (models often pad their embedding beyond it).
//
// Thread-safety: immutable after construction (the BPE cache inside is synchronized); all
// methods are const and may be called from any thread. Copies share the loaded tables.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/tokenizer/gguf_metadata.h"

namespace kvferry::tokenizer {

struct Pipeline;
class StreamDecoder;

// The special tokens' strings as the tokenizer files name them ("" where absent).
struct SpecialTokens {
  std::string bos;
  std::string eos;
  std::string unk;
  std::string pad;
  std::vector<std::string> additional;  // additional_special_tokens
};

class Tokenizer {
 public:
  // kvferry's built-in vocabulary: ids 0..255 are the bytes, 256 <bos>, 257 <eos>, 258 <pad>,
  // 259 <unk>. Encode(text, true) is <bos> and then one id per byte of any text (valid UTF-8
  // or not); the specials' strings in the text are ordinary bytes.
  static constexpr int32_t kBuiltinBos = 256;
  static constexpr int32_t kBuiltinEos = 257;
  static constexpr int32_t kBuiltinPad = 258;
  static constexpr int32_t kBuiltinUnk = 259;
  static constexpr int32_t kBuiltinVocabSize = 260;
  static Tokenizer BuiltinByteLevel();

  // A tokenizer.json text and, optionally, a tokenizer_config.json text (bos/eos/unk/pad
  // tokens, additional_special_tokens, chat_template).
  static StatusOr<Tokenizer> FromHuggingFaceJson(std::string_view tokenizer_json,
                                                 std::string_view tokenizer_config_json = {});
  // The same from files; an empty config path means none.
  static StatusOr<Tokenizer> FromHuggingFaceFiles(
      const std::filesystem::path& tokenizer_json,
      const std::filesystem::path& tokenizer_config_json = {});
  // GGUF tokenizer metadata (see gguf_metadata.h for what is supported).
  static StatusOr<Tokenizer> FromGguf(const GgufTokenizerMetadata& metadata);

  // The ids of `text`, with the post-processor's special tokens (bos, ...) when
  // add_special_tokens. Special tokens written in the text ("<|im_start|>") become their ids.
  // kInvalidArgument if the text is not valid UTF-8 (except for the built-in vocabulary);
  // kResourceExhausted if a stage's regex or output exceeds its work limits.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;

  // The text of `ids` (valid UTF-8; ill-formed byte sequences become U+FFFD). Special tokens
  // are left out when skip_special_tokens; unknown ids are always left out.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // As Decode, but the raw bytes: ill-formed sequences (a character split across a partial
  // output, or garbage a model emitted) are kept as they are.
  std::string DecodeBytes(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The bytes one token stands for in the middle of a text (so "▁Hello" gives " Hello" and the
  // byte token <0xE4> the byte E4), for logprobs; an added token gives its content; "" for an
  // unknown id. TokenText is the same made valid UTF-8.
  std::string TokenBytes(int32_t id) const;
  std::string TokenText(int32_t id) const;

  // The vocabulary's string for an id (added tokens included), or nothing.
  std::optional<std::string> IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;

  // One past the largest id (added tokens included).
  int32_t vocab_size() const;
  std::optional<int32_t> bos_token_id() const;
  // Ids that end generation: eos (and, from GGUF, eot and eom).
  const std::vector<int32_t>& eos_token_ids() const;
  std::optional<int32_t> pad_token_id() const;
  std::optional<int32_t> unk_token_id() const;
  // Whether Encode(text, true) starts with bos_token_id().
  bool add_bos() const;
  bool IsSpecial(int32_t id) const;
  // Every special token id, ascending.
  const std::vector<int32_t>& special_token_ids() const;
  const SpecialTokens& special_tokens() const;
  // tokenizer_config.json's chat_template (the "default" one of a list), or "".
  const std::string& chat_template() const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const Pipeline> p) : p_(std::move(p)) {}
  static StatusOr<Tokenizer> Assemble(std::unique_ptr<Pipeline> p);
  std::string DecodeBytesAt(std::span<const int32_t> ids, bool skip_special_tokens,
                            bool at_start) const;

  std::shared_ptr<const Pipeline> p_;
};

}  // namespace kvferry::tokenizer
