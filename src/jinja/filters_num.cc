// The number filters: int and float (with Python's parsing of strings), round, abs.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "jinja/call_args.h"
#include "jinja/filters_internal.h"
#include "jinja/operators.h"
#include "jinja/str_ops.h"

namespace kvferry::jinja::internal {
namespace {

// Python's float(str): surrounding whitespace, a sign, `_` between digits, inf and nan.
std::optional<double> ParsePyFloat(const std::string& text) {
  std::string s = StripChars(text, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !IsAsciiDigit(s[i - 1]) || !IsAsciiDigit(s[i + 1])) {
        return {};
      }
      continue;
    }
    t.push_back(s[i]);
  }
  bool neg = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    t.erase(0, 1);
  }
  std::string lower = StrLower(t);
  double v = 0;
  if (lower == "inf" || lower == "infinity") {
    v = HUGE_VAL;
  } else if (lower == "nan") {
    v = std::nan("");
  } else {
    if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return {};
    auto res = std::from_chars(t.data(), t.data() + t.size(), v);
    if (res.ptr != t.data() + t.size()) return {};
    if (res.ec == std::errc::result_out_of_range)
      v = std::strtod(t.c_str(), nullptr);
    else if (res.ec != std::errc())
      return {};
  }
  return neg ? -v : v;
}

// Python's int(str, base) for bases 2..36 and 0; nullopt when it would raise ValueError.
std::optional<int64_t> ParsePyInt(const std::string& text, int64_t base) {
  std::string s = StripChars(text, std::nullopt, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.erase(0, 1);
  }
  auto prefix = [&](char c) { return s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == c; };
  if (base == 0) {
    base = prefix('x') ? 16 : prefix('o') ? 8 : prefix('b') ? 2 : 10;
    if (base == 10 && s.size() > 1 && s[0] == '0' &&
        s.find_first_not_of("0_") != std::string::npos) {
      return {};
    }
  }
  if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
    s.erase(0, 2);
    if (!s.empty() && s[0] == '_') s.erase(0, 1);
  }
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_') continue;
    digits.push_back(s[i]);
  }
  if (digits.empty() || base < 2 || base > 36) return {};
  int64_t v = 0;
  auto res =
      std::from_chars(digits.data(), digits.data() + digits.size(), v, static_cast<int>(base));
  if (res.ec != std::errc() || res.ptr != digits.data() + digits.size()) return {};
  return neg ? -v : v;
}

// Python's round(x, n) for a float: correctly rounded, ties to even.
double RoundFloat(double x, int64_t n) {
  if (!std::isfinite(x) || n > 320) return x;
  if (n < 0) {
    if (n < -308) return std::copysign(0.0, x);
    const double scale = std::pow(10.0, static_cast<double>(-n));
    return std::nearbyint(x / scale) * scale;
  }
  std::vector<char> buf(400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(n), x);
  return std::strtod(buf.data(), nullptr);
}

// Python's round(i, n) for an int and n < 0: ties to even.
int64_t RoundInt(int64_t i, int64_t n) {
  if (n >= 0) return i;
  if (n < -18) return 0;
  int64_t scale = 1;
  for (int64_t k = 0; k < -n; ++k) scale *= 10;
  int64_t q = i / scale, r = i % scale;
  if (r < 0) {
    r += scale;
    --q;
  }
  if (2 * r > scale || (2 * r == scale && (q % 2 != 0))) ++q;
  return q * scale;
}

}  // namespace

StatusOr<Value> IntFilter(const Value& v, const CallArgs& args, Budget&) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("int", args, {"default", "base"}));
  Value fallback = b.GetOr(0, Value::Int(0));
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_integer());
  std::optional<double> d;
  if (v.is_float()) {
    d = v.as_float();
  } else if (v.is_string()) {
    KVF_ASSIGN_OR_RETURN(int64_t base, ArgInt("int", "base", b.GetOr(1, Value::Int(10))));
    if (auto i = ParsePyInt(v.as_string(), base)) return Value::Int(*i);
    d = ParsePyFloat(v.as_string());
  }
  if (!d || std::isnan(*d)) return fallback;
  if (std::isinf(*d)) return OutOfRangeError("cannot convert float infinity to integer");
  if (std::fabs(*d) >= 9.2233720368547758e18) return OutOfRangeError("integer overflow");
  return Value::Int(static_cast<int64_t>(std::trunc(*d)));
}

StatusOr<Value> FloatFilter(const Value& v, const CallArgs& args, Budget&) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("float", args, {"default"}));
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_number()) return Value::Float(v.as_double());
  if (v.is_string()) {
    if (auto d = ParsePyFloat(v.as_string())) return Value::Float(*d);
  }
  return b.GetOr(0, Value::Float(0.0));
}

StatusOr<Value> Round(const Value& v, const CallArgs& args, Budget&) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("round", args, {"precision", "method"}));
  KVF_ASSIGN_OR_RETURN(int64_t precision, ArgInt("round", "precision", b.GetOr(0, Value::Int(0))));
  const Value method = b.GetOr(1, Value::Str("common"));
  if (!method.is_string() || (method.as_string() != "common" && method.as_string() != "ceil" &&
                              method.as_string() != "floor")) {
    return InvalidArgumentError("method must be common, ceil or floor");
  }
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number()) {
    return InvalidArgumentError("type " + v.TypeName() + " doesn't define __round__ method");
  }
  if (method.as_string() == "common") {
    if (!v.is_float()) return Value::Int(RoundInt(v.as_integer(), precision));
    return Value::Float(RoundFloat(v.as_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  // Python's math.ceil/floor return an int, so a zero result has no sign.
  const double whole = (method.as_string() == "ceil" ? std::ceil(x) : std::floor(x)) + 0.0;
  return Value::Float(whole / scale);
}

StatusOr<Value> Abs(const Value& v, const CallArgs& args, Budget&) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("abs", args, {}).status());
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_integer() == INT64_MIN) return OutOfRangeError("integer overflow");
    return Value::Int(std::llabs(v.as_integer()));
  }
  return InvalidArgumentError("bad operand type for abs(): '" + v.TypeName() + "'");
}

}  // namespace kvferry::jinja::internal
