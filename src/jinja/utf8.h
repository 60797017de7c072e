// UTF-8 code-point helpers for the template renderer: Python strings are sequences of code
// points, so length, indexing, slicing, stripping and case mapping work on code points, not
// bytes. Strings inside the renderer are always valid UTF-8 (checked where they enter).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvferry::jinja::utf8 {

// True if `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValid(std::string_view s);

// True if every byte is below 0x80 (then bytes and code points coincide).
bool IsAscii(std::string_view s);

// The code points of valid UTF-8 `s`.
std::vector<char32_t> Decode(std::string_view s);

// Appends the UTF-8 encoding of `cp` to `out`.
void Append(char32_t cp, std::string* out);
std::string Encode(const std::vector<char32_t>& cps);

// Number of code points in valid UTF-8 `s`.
size_t Length(std::string_view s);

// Python's str.isspace() for one code point.
bool IsSpace(char32_t cp);

// Simple case mapping, as Python's str.upper()/lower() for the ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic letters; other code points are returned unchanged.
char32_t ToUpper(char32_t cp);
char32_t ToLower(char32_t cp);
// Whether `cp` has case (Python's "cased" characters, within the ranges above).
bool IsCased(char32_t cp);
bool IsUpper(char32_t cp);
bool IsLower(char32_t cp);

// Python's str.isprintable() for one code point, approximated by its general category for the
// ranges chat data meets (controls, separators, format characters, surrogates, private use).
bool IsPrintable(char32_t cp);

}  // namespace kvferry::jinja::utf8
