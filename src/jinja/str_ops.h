// Python's str algorithms on UTF-8 strings (by code point), shared by the str methods
// (`s.strip()`) and the filters (`s|trim`, `s|upper`): stripping, case mapping, splitting,
// replacing, searching, padding.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jinja/budget.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

// str.strip/lstrip/rstrip(chars); no chars: whitespace.
std::string StripChars(const std::string& s, const std::optional<std::string>& chars, bool left,
                       bool right);

std::string StrUpper(const std::string& s);
std::string StrLower(const std::string& s);
std::string StrTitle(const std::string& s);
std::string StrCapitalize(const std::string& s);

// str.split(sep, maxsplit) / str.rsplit; no sep: runs of whitespace. maxsplit < 0: no limit.
StatusOr<std::vector<std::string>> StrSplit(const std::string& s,
                                            const std::optional<std::string>& sep, int64_t maxsplit,
                                            bool from_right);
// str.splitlines(keepends).
std::vector<std::string> StrSplitLines(const std::string& s, bool keepends);

// str.replace(old, new, count); count < 0 replaces all.
StatusOr<std::string> StrReplace(const std::string& s, const std::string& old,
                                 const std::string& repl, int64_t count, Budget& budget);

// The code-point index of `sub` in s[start:end] (Python's find/rfind), or -1.
int64_t StrFind(const std::string& s, const std::string& sub, std::optional<int64_t> start,
                std::optional<int64_t> end, bool from_right);
// Non-overlapping occurrences of `sub` in s[start:end] (str.count).
int64_t StrCount(const std::string& s, const std::string& sub, std::optional<int64_t> start,
                 std::optional<int64_t> end);

// s padded with `fill` (one code point) to `width` code points: center, ljust, rjust.
enum class Align { kCenter, kLeft, kRight };
StatusOr<std::string> StrPad(const std::string& s, int64_t width, const std::string& fill,
                             Align align, Budget& budget);

// s[start:end] by code points, with Python's clamping of negative and large bounds.
std::string StrSubstr(const std::string& s, std::optional<int64_t> start,
                      std::optional<int64_t> end);

// markupsafe's escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(const std::string& s);

}  // namespace kvferry::jinja
