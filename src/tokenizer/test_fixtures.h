// Small tokenizer.json files for the tests of this folder: a SentencePiece-style BPE (Llama 2 /
// Mistral layout: Prepend + Replace normalizer, byte fallback, unk, bos template, the
// Replace/ByteFallback/Fuse/Strip decoder) and a byte-level BPE (Llama 3 / Qwen layout: Split
// regex + ByteLevel, all 256 byte tokens, added special tokens).
//
// Test-only. Thread-safety: each call returns a fresh value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"

namespace kvferry::tokenizer::testing {

inline const char* const kMark = "\xE2\x96\x81";  // ▁

// Ids: <unk> 0, <s> 1, </s> 2, <0xE4> 3, <0xB8> 4, <0xAD> 5, ▁ 6, H 7, e 8, l 9, o 10, ▁H 11,
// ll 12, ▁He 13, llo 14, ▁Hello 15, w 16, r 17, d 18, ▁w 19, ! 20.
inline nlohmann::json SentencePieceJson() {
  const std::string m = kMark;
  auto added = [](int id, const char* content) {
    return nlohmann::json{{"id", id},        {"content", content}, {"single_word", false},
                          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                          {"special", true}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", m}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", nlohmann::json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", {{"<unk>", 0},      {"<s>", 1},    {"</s>", 2}, {"<0xE4>", 3},  {"<0xB8>", 4},
                       {"<0xAD>", 5},     {m, 6},        {"H", 7},    {"e", 8},       {"l", 9},
                       {"o", 10},         {m + "H", 11}, {"ll", 12},  {m + "He", 13}, {"llo", 14},
                       {m + "Hello", 15}, {"w", 16},     {"r", 17},   {"d", 18},      {m + "w", 19},
                       {"!", 20}}},
            {"merges", {m + " H", "l l", m + "H e", "ll o", m + "He llo", m + " w"}}}}};
}

inline nlohmann::json SentencePieceConfig() {
  return {{"bos_token", "<s>"},
          {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
          {"unk_token", "<unk>"},
          {"pad_token", nullptr},
          {"chat_template",
           {{{"name", "tool_use"}, {"template", "U"}}, {{"name", "default"}, {"template", "T"}}}}};
}

// Byte tokens 0..255 in GPT-2's byte-level spelling; "he" 256, "ll" 257, "hell" 258, "Ġh" 259;
// added: <|im_start|> 300 (special), <think> 301 (not special).
inline nlohmann::json ByteLevelJson(const char* split_regex) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string t;
    AppendByteLevel(std::string(1, static_cast<char>(b)), &t);
    vocab[t] = b;
  }
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["\xC4\xA0h"] = 259;
  auto added = [](int id, const char* content, bool special) {
    return nlohmann::json{{"id", id},          {"content", content}, {"single_word", false},
                          {"lstrip", false},   {"rstrip", false},    {"normalized", false},
                          {"special", special}};
  };
  return {{"added_tokens", {added(300, "<|im_start|>", true), added(301, "<think>", false)}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", split_regex}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", false},
               {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges",
             nlohmann::json::array(
                 {nlohmann::json::array({"h", "e"}), nlohmann::json::array({"l", "l"}),
                  nlohmann::json::array({"he", "ll"}), nlohmann::json::array({"\xC4\xA0", "h"})})},
            {"ignore_merges", false}}}};
}

// Qwen2's pre-tokenizer regex (its tokenizer.json), which GGUF calls "qwen2".
inline const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace kvferry::tokenizer::testing
