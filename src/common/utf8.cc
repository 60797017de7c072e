#include "kvferry/common/utf8.h"

namespace kvferry {
namespace {

// For a lead byte: the length of its sequence and the allowed range of the second byte (the
// later ones are always 80..BF). Length 0 marks a byte that cannot start a character.
struct LeadInfo {
  size_t length;
  unsigned char lo, hi;
};

LeadInfo Lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// How many bytes from s[i] follow the pattern of the sequence s[i] starts (at least 1, at most
// its length); equals the length when the sequence is complete and well formed.
size_t MatchedPrefix(std::string_view s, size_t i, const LeadInfo& lead) {
  size_t n = 1;
  while (n < lead.length && i + n < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    const bool ok = n == 1 ? (b >= lead.lo && b <= lead.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t WellFormedLength(std::string_view s, size_t i) {
  const LeadInfo lead = Lead(static_cast<unsigned char>(s[i]));
  if (lead.length == 0) return 0;
  return MatchedPrefix(s, i, lead) == lead.length ? lead.length : 0;
}

size_t FirstInvalidOffset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = WellFormedLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

std::string ToValidUtf8(std::string_view s) {
  const size_t first_bad = FirstInvalidOffset(s);
  if (first_bad == s.size()) return std::string(s);
  std::string out(s.substr(0, first_bad));
  size_t i = first_bad;
  while (i < s.size()) {
    const LeadInfo lead = Lead(static_cast<unsigned char>(s[i]));
    const size_t matched = lead.length == 0 ? 1 : MatchedPrefix(s, i, lead);
    if (lead.length != 0 && matched == lead.length) {
      out.append(s.substr(i, matched));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal subpart
    }
    i += matched;
  }
  return out;
}

size_t IncompleteTailLength(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const size_t i = s.size() - k;
    const LeadInfo lead = Lead(static_cast<unsigned char>(s[i]));
    if (lead.length > k && MatchedPrefix(s, i, lead) == k) return k;
  }
  return 0;
}

char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  const size_t n = SequenceLength(b0);
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace kvferry
