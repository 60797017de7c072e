// GPT-2's reversible map between bytes and printable Unicode characters, which byte-level BPE
// vocabularies (GPT-2, Llama 3, Qwen2/3) are written in: printable Latin-1 bytes map to
// themselves, the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) to U+0100 onwards, so that
// a space is 'Ġ' (U+0120) and a newline 'Ċ' (U+010A).
//
// Internal to src/tokenizer. Thread-safety: immutable tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvferry::tokenizer {

// The character byte `b` is written as.
char32_t ByteToChar(uint8_t b);
// The byte that character `cp` stands for, if it is one of the 256.
std::optional<uint8_t> CharToByte(char32_t cp);

// Every byte of `bytes` (any bytes) written as its character, appended to `out` as UTF-8.
void AppendByteLevel(std::string_view bytes, std::string* out);

// The bytes a byte-level token stands for, if every character of `token` is one of the 256.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

}  // namespace kvferry::tokenizer
