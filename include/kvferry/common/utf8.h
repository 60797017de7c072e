// UTF-8 helpers: validation, code point iteration and encoding, the Unicode "maximal subpart"
// replacement of ill-formed bytes by U+FFFD, and the length of an incomplete tail. Used by the
// tokenizer (bytes from models and clients) and the template renderer (Python strings are
// sequences of code points).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvferry {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
// (ill-formed or cut off by the end of s).
size_t WellFormedLength(std::string_view s, size_t i);

// Offset of the first ill-formed byte, or s.size() if s is valid UTF-8.
size_t FirstInvalidOffset(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return FirstInvalidOffset(s) == s.size(); }

// s with each maximal ill-formed subpart replaced by one U+FFFD (Unicode 15 §3.9, the rule the
// WHATWG decoder and Rust's from_utf8_lossy follow).
std::string ToValidUtf8(std::string_view s);

// Number of bytes at the end of s that start a multi-byte character but stop before its end
// (0..3). Such a tail may still be completed by bytes that follow.
size_t IncompleteTailLength(std::string_view s);

// The code point at s[*i] of valid UTF-8 s; advances *i past it.
char32_t NextCodePoint(std::string_view s, size_t* i);

// Appends the UTF-8 form of a Unicode scalar value.
void AppendUtf8(char32_t cp, std::string* out);

// Byte length of the character whose lead byte is `lead`, for valid UTF-8.
inline size_t SequenceLength(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace kvferry
