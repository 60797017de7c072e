#include "jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

// The code point at `pos` of valid UTF-8 `s` and its byte length.
char32_t CodePointAt(std::string_view s, size_t pos, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  *len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  *len = std::min(*len, s.size() - pos);
  return utf8::Decode(s.substr(pos, *len)).front();
}

// Python's str.rstrip() (Unicode whitespace).
std::string_view RStripSpace(std::string_view s) {
  auto cps = utf8::Decode(s);
  size_t keep = s.size();
  while (!cps.empty() && utf8::IsSpace(cps.back())) {
    std::string tail;
    utf8::Append(cps.back(), &tail);
    keep -= tail.size();
    cps.pop_back();
  }
  return s.substr(0, keep);
}

bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t cp : utf8::Decode(s)) {
    if (!utf8::IsSpace(cp)) return false;
  }
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// The code point of the one-letter escape `\e` (`\n`, `\t`, `\"`, ...), if `e` is one.
std::optional<char32_t> SingleCharEscape(char e) {
  switch (e) {
    case '\\':
    case '\'':
    case '"':
      return e;
    case 'a':
      return 0x07;
    case 'b':
      return 0x08;
    case 'f':
      return 0x0C;
    case 'n':
      return 0x0A;
    case 'r':
      return 0x0D;
    case 't':
      return 0x09;
    case 'v':
      return 0x0B;
    default:
      return std::nullopt;
  }
}

// The `digits` hex digits at `*i` of `s` (`what` names the escape in the error); advances `*i`.
StatusOr<char32_t> HexDigits(std::string_view s, size_t* i, size_t digits, const char* what) {
  if (*i + digits > s.size()) return InvalidArgumentError(std::string("truncated ") + what);
  char32_t v = 0;
  for (size_t k = 0; k < digits; ++k) {
    const char c = s[*i + k];
    if (!IsHex(c)) return InvalidArgumentError(std::string("truncated ") + what);
    v = v * 16 + (IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  *i += digits;
  return v;
}

// Python's "unicode-escape" decoding of an ASCII string (after backslashreplace), which is how
// Jinja2 decodes string literals.
StatusOr<std::string> UnicodeEscape(std::string_view s) {
  std::vector<char32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i++];
    if (c != '\\') {
      out.push_back(static_cast<unsigned char>(c));
      continue;
    }
    if (i >= s.size()) return InvalidArgumentError("\\ at end of string");
    const char e = s[i++];
    char32_t cp = 0;
    if (e == '\n') continue;
    if (std::optional<char32_t> single = SingleCharEscape(e)) {
      cp = *single;
    } else if (e == 'x') {
      KVF_ASSIGN_OR_RETURN(cp, HexDigits(s, &i, 2, "\\xXX escape"));
    } else if (e == 'u') {
      KVF_ASSIGN_OR_RETURN(cp, HexDigits(s, &i, 4, "\\uXXXX escape"));
    } else if (e == 'U') {
      KVF_ASSIGN_OR_RETURN(cp, HexDigits(s, &i, 8, "\\UXXXXXXXX escape"));
      if (cp > 0x10FFFF) return InvalidArgumentError("illegal Unicode character");
    } else if (e == 'N') {
      return UnimplementedError("\\N{...} escapes are not supported");
    } else if (e >= '0' && e <= '7') {
      cp = e - '0';
      for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k) {
        cp = cp * 8 + (s[i++] - '0');
      }
    } else {  // unknown escapes keep their backslash, as Python does
      out.push_back('\\');
      cp = static_cast<unsigned char>(e);
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      return InvalidArgumentError("lone surrogate in a string literal");
    }
    out.push_back(cp);
  }
  return utf8::Encode(out);
}

// Decodes the body of a string literal (between the quotes) as Jinja2 does: non-ASCII
// characters become backslash escapes first, then unicode-escape decoding runs.
StatusOr<std::string> DecodeStringBody(std::string_view body) {
  std::string ascii;
  ascii.reserve(body.size());
  for (char32_t cp : utf8::Decode(body)) {
    if (cp < 0x80) {
      ascii.push_back(static_cast<char>(cp));
      continue;
    }
    char buf[16];
    if (cp < 0x100) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
    }
    ascii += buf;
  }
  return UnicodeEscape(ascii);
}

class Lexer {
 public:
  explicit Lexer(const SourceMap& map) : map_(map), src_(map.text()) {}

  StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      KVF_ASSIGN_OR_RETURN(bool more, RootStep());
      if (!more) break;
    }
    Emit(TokenKind::kEof, "", src_.size());
    return std::move(out_);
  }

 private:
  Status Error(size_t offset, const std::string& msg) const {
    return InvalidArgumentError(map_.Location(static_cast<uint32_t>(offset)) + ": " + msg);
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.offset = static_cast<uint32_t>(offset);
    out_.push_back(std::move(t));
  }

  bool StartsWith(size_t pos, std::string_view s) const {
    return src_.compare(pos, s.size(), s) == 0;
  }

  size_t SkipSpace(size_t pos) const {
    while (pos < src_.size()) {
      size_t len = 0;
      if (!utf8::IsSpace(CodePointAt(src_, pos, &len))) break;
      pos += len;
    }
    return pos;
  }

  // Text before a tag, after `-` stripping or lstrip_blocks. Variables are never lstripped.
  std::string_view StripBefore(std::string_view text, char sign, bool is_variable) const {
    if (sign == '-') return RStripSpace(text);
    if (sign == '+' || is_variable) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && AllSpace(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  void EmitData(std::string_view text, size_t offset) {
    if (!text.empty()) Emit(TokenKind::kData, std::string(text), offset);
  }

  // After a tag's closing delimiter: where the next text starts.
  size_t AfterClose(size_t pos, char sign, bool trim_newline) const {
    if (sign == '-') return SkipSpace(pos);
    if (sign != '+' && trim_newline && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  void SetLineStarting() { line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n'; }

  // One text run and the tag after it. Returns false at the end of input inside a tag.
  StatusOr<bool> RootStep() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        EmitData(std::string_view(src_).substr(pos_), pos_);
        pos_ = src_.size();
        return true;
      }
      const char k = src_[tag + 1];
      if (k == '%' || k == '{' || k == '#') break;
      ++tag;
    }
    const char kind = src_[tag + 1];
    const size_t after = tag + 2;
    const char sign =
        (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : '\0';
    const std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
    EmitData(StripBefore(text, sign, kind == '{'), pos_);
    line_starting_ = false;
    pos_ = after + (sign ? 1 : 0);
    if (kind == '#') return LexComment(tag);
    if (kind == '%') {
      const size_t raw_body = MatchRawBegin(tag);
      if (raw_body != std::string::npos) return LexRaw(tag, raw_body);
    }
    return LexTag(tag, kind == '%');
  }

  StatusOr<bool> LexComment(size_t tag) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) return Error(tag, "Missing end of comment tag");
    char sign = '\0';
    if (close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    pos_ = AfterClose(close + 2, sign, /*trim_newline=*/true);
    SetLineStarting();
    return true;
  }

  // If a `{% raw %}` tag starts at `tag`, the offset after it; otherwise npos.
  size_t MatchRawBegin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = SkipSpace(p);
    if (!StartsWith(p, "raw")) return std::string::npos;
    p = SkipSpace(p + 3);
    if (StartsWith(p, "-%}")) return SkipSpace(p + 3);
    if (StartsWith(p, "%}")) return p + 2;
    return std::string::npos;
  }

  // If `{% endraw %}` starts at `p`, its end and sign.
  size_t MatchEndRaw(size_t p, char* sign) const {
    p += 2;
    *sign = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) *sign = src_[p++];
    p = SkipSpace(p);
    if (!StartsWith(p, "endraw")) return std::string::npos;
    p = SkipSpace(p + 6);
    if (StartsWith(p, "+%}")) return p + 3;
    if (StartsWith(p, "-%}")) return SkipSpace(p + 3);
    if (StartsWith(p, "%}")) return (p + 2 < src_.size() && src_[p + 2] == '\n') ? p + 3 : p + 2;
    return std::string::npos;
  }

  StatusOr<bool> LexRaw(size_t tag, size_t body) {
    pos_ = body;
    SetLineStarting();
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      char sign = '\0';
      const size_t end = MatchEndRaw(p, &sign);
      if (end == std::string::npos) continue;
      EmitData(StripBefore(std::string_view(src_).substr(body, p - body), sign, false), body);
      pos_ = end;
      SetLineStarting();
      return true;
    }
    return Error(tag, "Missing end of raw directive");
  }

  // If the tag's closing delimiter starts at pos_, consumes it (and what trimming removes).
  bool MatchClose(bool block) {
    if (block) {
      if (StartsWith(pos_, "+%}")) {
        pos_ += 3;
      } else if (StartsWith(pos_, "-%}")) {
        pos_ = AfterClose(pos_ + 3, '-', false);
      } else if (StartsWith(pos_, "%}")) {
        pos_ = AfterClose(pos_ + 2, '\0', /*trim_newline=*/true);
      } else {
        return false;
      }
    } else if (StartsWith(pos_, "-}}")) {
      pos_ = AfterClose(pos_ + 3, '-', false);
    } else if (StartsWith(pos_, "}}")) {
      pos_ += 2;
    } else {
      return false;
    }
    return true;
  }

  StatusOr<bool> LexTag(size_t tag, bool block) {
    Emit(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", tag);
    std::vector<char> balance;
    while (pos_ < src_.size()) {
      const size_t start = pos_;
      if (balance.empty() && MatchClose(block)) {
        Emit(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", start);
        SetLineStarting();
        return true;
      }
      const size_t ws = SkipSpace(pos_);
      if (ws != pos_) {
        pos_ = ws;
        continue;
      }
      KVF_RETURN_IF_ERROR(LexExpressionToken(&balance));
    }
    return false;  // end of input inside a tag: the parser reports what it expected
  }

  Status LexExpressionToken(std::vector<char>* balance) {
    const size_t start = pos_;
    size_t end = MatchFloat(pos_);
    if (end != std::string::npos) return EmitFloat(start, end);
    end = MatchInteger(pos_);
    if (end != std::string::npos) return EmitInteger(start, end);
    if (IsNameStart(src_[pos_])) {
      while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
      Emit(TokenKind::kName, src_.substr(start, pos_ - start), start);
      return Status::Ok();
    }
    if (src_[pos_] == '\'' || src_[pos_] == '"') {
      end = MatchString(pos_);
      if (end != std::string::npos) {
        auto decoded = DecodeStringBody(std::string_view(src_).substr(start + 1, end - start - 2));
        if (!decoded.ok()) return Error(start, std::string(decoded.status().message()));
        Emit(TokenKind::kString, std::move(decoded).value(), start);
        pos_ = end;
        return Status::Ok();
      }
    }
    return LexOperator(balance);
  }

  Status LexOperator(std::vector<char>* balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    const size_t start = pos_;
    std::string op;
    for (std::string_view t : kTwo) {
      if (StartsWith(pos_, t)) op = std::string(t);
    }
    if (op.empty() && kOne.find(src_[pos_]) != std::string_view::npos) op = src_.substr(pos_, 1);
    if (op.empty()) {
      size_t len = 0;
      std::string ch;
      utf8::Append(CodePointAt(src_, pos_, &len), &ch);
      return Error(start, "unexpected char '" + ch + "'");
    }
    const char c = op[0];
    if (op.size() == 1 && (c == '(' || c == '[' || c == '{')) {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
      if (balance->empty()) return Error(start, "unexpected '" + op + "'");
      if (balance->back() != c) {
        return Error(start, "unexpected '" + op + "', expected '" + balance->back() + "'");
      }
      balance->pop_back();
    }
    pos_ += op.size();
    Emit(TokenKind::kOperator, std::move(op), start);
    return Status::Ok();
  }

  // End of `\d+(_\d+)*` at p, or npos.
  size_t MatchDigits(size_t p) const {
    if (p >= src_.size() || !IsDigit(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && IsDigit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && IsDigit(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  size_t MatchExponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) return std::string::npos;
    ++p;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    return MatchDigits(p);
  }

  size_t MatchFloat(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return std::string::npos;
    const size_t int_end = MatchDigits(p);
    if (int_end == std::string::npos) return std::string::npos;
    size_t frac_end = std::string::npos;
    if (int_end < src_.size() && src_[int_end] == '.') frac_end = MatchDigits(int_end + 1);
    if (frac_end != std::string::npos) {
      const size_t exp_end = MatchExponent(frac_end);
      return exp_end != std::string::npos ? exp_end : frac_end;
    }
    return MatchExponent(int_end);
  }

  // Python's integer literal forms (0b, 0o, 0x, decimal), with `_` separators.
  size_t MatchInteger(size_t p) const {
    if (p >= src_.size() || !IsDigit(src_[p])) return std::string::npos;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      auto digit_ok = [x](char c) {
        if (x == 'b') return c == '0' || c == '1';
        if (x == 'o') return c >= '0' && c <= '7';
        return IsHex(c);
      };
      if (x == 'b' || x == 'o' || x == 'x') {
        size_t q = p + 2;
        size_t end = std::string::npos;
        while (q < src_.size()) {
          const size_t d = (src_[q] == '_') ? q + 1 : q;
          if (d >= src_.size() || !digit_ok(src_[d])) break;
          q = d + 1;
          end = q;
        }
        if (end != std::string::npos) return end;
      }
    }
    if (src_[p] != '0') return MatchDigits(p);
    size_t q = p + 1;  // 0(_?0)*
    while (q < src_.size()) {
      const size_t d = (src_[q] == '_') ? q + 1 : q;
      if (d >= src_.size() || src_[d] != '0') break;
      q = d + 1;
    }
    return q;
  }

  Status EmitInteger(size_t start, size_t end) {
    std::string digits;
    for (size_t i = start; i < end; ++i) {
      if (src_[i] != '_') digits.push_back(src_[i]);
    }
    int base = 10;
    std::string_view body = digits;
    if (digits.size() > 1 && digits[0] == '0' && digits[1] != '0') {
      const char x = static_cast<char>(digits[1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : 16;
      body.remove_prefix(2);
    }
    int64_t v = 0;
    auto res = std::from_chars(body.data(), body.data() + body.size(), v, base);
    if (res.ec != std::errc()) return Error(start, "integer literal does not fit in 64 bits");
    Emit(TokenKind::kInteger, src_.substr(start, end - start), start);
    out_.back().int_value = v;
    pos_ = end;
    return Status::Ok();
  }

  Status EmitFloat(size_t start, size_t end) {
    std::string text;
    for (size_t i = start; i < end; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    double v = 0;
    auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec == std::errc::result_out_of_range) {
      // Python rounds overflow to inf and underflow to 0.0.
      const size_t e = text.find_first_of("eE");
      const bool big = e != std::string::npos && text[e + 1] != '-';
      v = big ? std::numeric_limits<double>::infinity() : 0.0;
    }
    Emit(TokenKind::kFloat, src_.substr(start, end - start), start);
    out_.back().float_value = v;
    pos_ = end;
    return Status::Ok();
  }

  // End (after the closing quote) of a string literal starting at p, or npos.
  size_t MatchString(size_t p) const {
    const char quote = src_[p];
    for (size_t i = p + 1; i < src_.size(); ++i) {
      if (src_[i] == '\\') {
        ++i;
      } else if (src_[i] == quote) {
        return i + 1;
      }
    }
    return std::string::npos;
  }

  const SourceMap& map_;
  const std::string& src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

SourceMap::SourceMap(std::string normalized) : text_(std::move(normalized)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
  }
}

std::string SourceMap::Location(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());
  const uint32_t start = line_starts_[line - 1];
  const size_t column = utf8::Length(std::string_view(text_).substr(start, offset - start)) + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

StatusOr<std::vector<Token>> Tokenize(const SourceMap& map) { return Lexer(map).Run(); }

}  // namespace kvferry::jinja
