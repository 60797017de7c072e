#include "jinja/str_ops.h"

#include <algorithm>

#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

// Clamps Python-style slice bounds to [0, len].
void ClampRange(int64_t len, std::optional<int64_t> start, std::optional<int64_t> end, int64_t* lo,
                int64_t* hi) {
  auto clamp = [len](int64_t i) {
    if (i < 0) i += len;
    return std::clamp<int64_t>(i, 0, len);
  };
  *lo = start ? clamp(*start) : 0;
  *hi = end ? clamp(*end) : len;
}

void AppendUpper(char32_t cp, std::string* out) {
  if (cp == 0xDF) {  // ß has no single-character uppercase
    out->append("SS");
    return;
  }
  utf8::Append(utf8::ToUpper(cp), out);
}

void AppendTitleChar(char32_t cp, std::string* out) {
  if (cp == 0xDF) {
    out->append("Ss");
    return;
  }
  utf8::Append(utf8::ToUpper(cp), out);
}

bool IsLineBreak(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

std::vector<std::string> SplitWhitespace(const std::vector<char32_t>& cps, int64_t maxsplit,
                                         bool from_right) {
  std::vector<std::string> parts;
  const int64_t n = static_cast<int64_t>(cps.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && utf8::IsSpace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(utf8::Encode({cps.begin() + i, cps.end()}));
        break;
      }
      int64_t j = i;
      while (j < n && !utf8::IsSpace(cps[j])) ++j;
      parts.push_back(utf8::Encode({cps.begin() + i, cps.begin() + j}));
      i = j;
    }
    return parts;
  }
  int64_t i = n;
  while (true) {
    while (i > 0 && utf8::IsSpace(cps[i - 1])) --i;
    if (i <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(utf8::Encode({cps.begin(), cps.begin() + i}));
      break;
    }
    int64_t j = i;
    while (j > 0 && !utf8::IsSpace(cps[j - 1])) --j;
    parts.push_back(utf8::Encode({cps.begin() + j, cps.begin() + i}));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

// Byte offset -> code-point index in valid UTF-8.
int64_t CodePointIndex(const std::string& s, size_t byte) {
  return static_cast<int64_t>(utf8::Length(std::string_view(s).substr(0, byte)));
}

// Byte offset of code-point index `i` (clamped to the end).
size_t ByteOffset(const std::string& s, int64_t i) {
  size_t b = 0;
  while (b < s.size() && i > 0) {
    ++b;
    while (b < s.size() && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) ++b;
    --i;
  }
  return b;
}

}  // namespace

std::string StripChars(const std::string& s, const std::optional<std::string>& chars, bool left,
                       bool right) {
  const auto cps = utf8::Decode(s);
  const auto set = chars ? utf8::Decode(*chars) : std::vector<char32_t>();
  auto strip = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : utf8::IsSpace(cp);
  };
  size_t lo = 0, hi = cps.size();
  if (left) {
    while (lo < hi && strip(cps[lo])) ++lo;
  }
  if (right) {
    while (hi > lo && strip(cps[hi - 1])) --hi;
  }
  return utf8::Encode({cps.begin() + lo, cps.begin() + hi});
}

std::string StrUpper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : utf8::Decode(s)) AppendUpper(cp, &out);
  return out;
}

std::string StrLower(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : utf8::Decode(s)) utf8::Append(utf8::ToLower(cp), &out);
  return out;
}

std::string StrTitle(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (char32_t cp : utf8::Decode(s)) {
    const bool cased = utf8::IsCased(cp);
    if (cased && !prev_cased) {
      AppendTitleChar(cp, &out);
    } else if (cased) {
      utf8::Append(utf8::ToLower(cp), &out);
    } else {
      utf8::Append(cp, &out);
    }
    prev_cased = cased;
  }
  return out;
}

std::string StrCapitalize(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (char32_t cp : utf8::Decode(s)) {
    if (first) {
      AppendTitleChar(cp, &out);
    } else {
      utf8::Append(utf8::ToLower(cp), &out);
    }
    first = false;
  }
  return out;
}

StatusOr<std::vector<std::string>> StrSplit(const std::string& s,
                                            const std::optional<std::string>& sep, int64_t maxsplit,
                                            bool from_right) {
  if (!sep) return SplitWhitespace(utf8::Decode(s), maxsplit, from_right);
  if (sep->empty()) return InvalidArgumentError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    parts.push_back(s.substr(pos));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string::npos) break;
    parts.push_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  parts.push_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> StrSplitLines(const std::string& s, bool keepends) {
  const auto cps = utf8::Decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!IsLineBreak(cps[i])) continue;
    size_t end = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    lines.push_back(utf8::Encode({cps.begin() + start, cps.begin() + (keepends ? end : i)}));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) lines.push_back(utf8::Encode({cps.begin() + start, cps.end()}));
  return lines;
}

StatusOr<std::string> StrReplace(const std::string& s, const std::string& old,
                                 const std::string& repl, int64_t count, Budget& budget) {
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    const auto cps = utf8::Decode(s);
    const uint64_t slots = cps.size() + 1;
    const uint64_t n = count < 0 ? slots : std::min<uint64_t>(slots, count);
    KVF_RETURN_IF_ERROR(budget.Build(s.size() + n * repl.size()));
    std::string out;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (i < n) out += repl;
      if (i < cps.size()) utf8::Append(cps[i], &out);
    }
    return out;
  }
  uint64_t hits = 0;
  for (size_t at = s.find(old); at != std::string::npos && (count < 0 || hits < uint64_t(count));
       at = s.find(old, at + old.size())) {
    ++hits;
  }
  const uint64_t size = s.size() - hits * old.size() + hits * repl.size();
  KVF_RETURN_IF_ERROR(budget.Build(size));
  std::string out;
  out.reserve(size);
  size_t pos = 0;
  for (uint64_t k = 0; k < hits; ++k) {
    const size_t at = s.find(old, pos);
    out.append(s, pos, at - pos);
    out += repl;
    pos = at + old.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string StrSubstr(const std::string& s, std::optional<int64_t> start,
                      std::optional<int64_t> end) {
  const int64_t len = static_cast<int64_t>(utf8::Length(s));
  int64_t lo = 0, hi = 0;
  ClampRange(len, start, end, &lo, &hi);
  if (hi <= lo) return "";
  const size_t b_lo = ByteOffset(s, lo);
  const size_t b_hi = ByteOffset(s, hi);
  return s.substr(b_lo, b_hi - b_lo);
}

int64_t StrFind(const std::string& s, const std::string& sub, std::optional<int64_t> start,
                std::optional<int64_t> end, bool from_right) {
  const int64_t len = static_cast<int64_t>(utf8::Length(s));
  int64_t lo = 0, hi = 0;
  ClampRange(len, start, end, &lo, &hi);
  if (hi < lo) return -1;
  const std::string window = StrSubstr(s, lo, hi);
  const size_t at = from_right ? window.rfind(sub) : window.find(sub);
  if (at == std::string::npos) return -1;
  return lo + CodePointIndex(window, at);
}

int64_t StrCount(const std::string& s, const std::string& sub, std::optional<int64_t> start,
                 std::optional<int64_t> end) {
  const int64_t len = static_cast<int64_t>(utf8::Length(s));
  int64_t lo = 0, hi = 0;
  ClampRange(len, start, end, &lo, &hi);
  if (hi < lo) return 0;
  const std::string window = StrSubstr(s, lo, hi);
  if (sub.empty()) return static_cast<int64_t>(utf8::Length(window)) + 1;
  int64_t n = 0;
  for (size_t at = window.find(sub); at != std::string::npos;
       at = window.find(sub, at + sub.size())) {
    ++n;
  }
  return n;
}

StatusOr<std::string> StrPad(const std::string& s, int64_t width, const std::string& fill,
                             Align align, Budget& budget) {
  const auto fill_cps = utf8::Decode(fill);
  if (fill_cps.size() != 1) {
    return InvalidArgumentError("The fill character must be exactly one character long");
  }
  const int64_t len = static_cast<int64_t>(utf8::Length(s));
  if (width <= len) return s;
  const int64_t pad = width - len;
  KVF_RETURN_IF_ERROR(budget.CheckProduct(pad, fill.size()));
  KVF_RETURN_IF_ERROR(budget.Build(s.size() + pad * fill.size()));
  int64_t left = 0;
  if (align == Align::kRight) left = pad;
  if (align == Align::kCenter) left = pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < pad; ++i) out += fill;
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace kvferry::jinja
