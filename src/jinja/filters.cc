#include "jinja/filters.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja/call_args.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/percent_format.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/tests.h"
#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

using FilterFn = StatusOr<Value> (*)(const Value& v, const CallArgs& args, Budget& budget);

Value Iterator(std::vector<Value> items) {
  return Value::MakeList(std::move(items), SeqKind::kIterator);
}

bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// ---- attribute paths (make_attrgetter) ----

// "a.b.0" -> ["a", "b", 0]; a non-string attribute is one part.
std::vector<Value> AttributeParts(const Value& attribute) {
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  auto split = StrSplit(attribute.as_string(), std::string("."), -1, false);
  for (auto& p : *split) {
    const bool digits =
        !p.empty() && std::all_of(p.begin(), p.end(), IsAsciiDigit) && p.size() < 18;
    parts.push_back(digits ? Value::Int(std::stoll(p)) : Value::Str(p));
  }
  return parts;
}

StatusOr<Value> GetPath(Value item, const std::vector<Value>& parts, const Value* fallback,
                        Budget& budget) {
  for (const Value& part : parts) {
    KVF_ASSIGN_OR_RETURN(item, GetItem(item, part, budget));
    if (fallback != nullptr && item.is_undefined()) item = *fallback;
  }
  return item;
}

// A string result of a str method applied to `in`: Markup stays Markup, as markupsafe's
// methods return Markup.
Value LikeInput(const Value& in, std::string s) {
  return in.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::Str(StrLower(v.as_string())) : v; }

// Sorts `items` by `keys` (stable, as Python's sorted); comparison errors are returned.
Status SortByKeys(std::vector<Value>* items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    auto less = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  KVF_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return Status::Ok();
}

// ---- strings ----

StatusOr<Value> Trim(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("trim", args, {"chars"}));
  std::optional<std::string> chars;
  if (b.Has(0) && !b.Get(0)->is_none()) {
    KVF_ASSIGN_OR_RETURN(chars, ArgString("trim", "chars", *b.Get(0)));
  }
  const std::string s = ToPyStr(v);
  KVF_RETURN_IF_ERROR(budget.ChargeBytes(s.size()));
  return LikeInput(v, StripChars(s, chars, true, true));
}

// Jinja2's title: words start after runs of whitespace, '-', '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s) {
  auto is_sep = [](char32_t cp) {
    return utf8::IsSpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
  };
  const auto cps = utf8::Decode(s);
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    const bool sep = is_sep(cps[i]);
    size_t j = i;
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string first;
    utf8::Append(cps[i], &first);
    out += StrUpper(first);
    out += StrLower(utf8::Encode({cps.begin() + i + 1, cps.begin() + j}));
    i = j;
  }
  return out;
}

StatusOr<Value> Indent(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("indent", args, {"width", "first", "blank"}));
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_string()) {
    return InvalidArgumentError("unsupported operand type(s) for +=: '" + v.TypeName() +
                                "' and 'str'");
  }
  const Value width = b.GetOr(0, Value::Int(4));
  std::string pad;
  if (width.is_string()) {
    pad = width.as_string();
  } else {
    KVF_ASSIGN_OR_RETURN(int64_t n, ArgInt("indent", "width", width));
    KVF_RETURN_IF_ERROR(budget.CheckSize(static_cast<size_t>(std::max<int64_t>(n, 0))));
    pad = std::string(std::max<int64_t>(n, 0), ' ');
  }
  const std::vector<std::string> lines = StrSplitLines(v.as_string() + "\n", false);
  KVF_RETURN_IF_ERROR(budget.Build(v.as_string().size() + (lines.size() + 1) * pad.size()));
  const bool blank = b.GetOr(2, Value::Bool(false)).Truthy();
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (b.GetOr(1, Value::Bool(false)).Truthy()) out = pad + out;
  return LikeInput(v, std::move(out));
}

StatusOr<Value> Replace(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("replace", args, {"old", "new", "count"}, 2));
  int64_t count = -1;
  if (b.Has(2) && !b.Get(2)->is_none()) {
    KVF_ASSIGN_OR_RETURN(count, ArgInt("replace", "count", *b.Get(2)));
  }
  KVF_ASSIGN_OR_RETURN(std::string out, StrReplace(ToPyStr(v), ToPyStr(*b.Get(0)),
                                                   ToPyStr(*b.Get(1)), count, budget));
  return Value::Str(std::move(out));
}

StatusOr<Value> Format(const Value& v, const CallArgs& args, Budget& budget) {
  if (!args.args.empty() && !args.kwargs.empty()) {
    return InvalidArgumentError("can't handle positional and keyword arguments at the same time");
  }
  if (!args.kwargs.empty()) return UnimplementedError("format with keyword arguments");
  KVF_ASSIGN_OR_RETURN(std::string out,
                       PercentFormat(ToPyStr(v), Value::MakeList(args.args, SeqKind::kTuple),
                                     v.is_markup(), budget));
  return LikeInput(v, std::move(out));
}

StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(
      auto b,
      BoundArgs::Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  o.ensure_ascii = b.GetOr(0, Value::Bool(false)).Truthy();
  o.sort_keys = b.GetOr(3, Value::Bool(false)).Truthy();
  if (const Value* indent = b.Get(1); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent = indent->as_string();
    } else {
      KVF_ASSIGN_OR_RETURN(int64_t n, ArgInt("tojson", "indent", *indent));
      KVF_RETURN_IF_ERROR(budget.CheckSize(static_cast<size_t>(std::max<int64_t>(n, 0))));
      o.indent = std::string(std::max<int64_t>(n, 0), ' ');
    }
  }
  if (const Value* sep = b.Get(2); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() ||
        !sep->items()[1].is_string()) {
      return InvalidArgumentError("tojson: separators must be a pair of strings");
    }
    o.item_separator = sep->items()[0].as_string();
    o.key_separator = sep->items()[1].as_string();
  }
  KVF_ASSIGN_OR_RETURN(std::string out, ToJson(v, o));
  KVF_RETURN_IF_ERROR(budget.Build(out.size()));
  return Value::Str(std::move(out));
}

// ---- numbers ----

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

// ---- sequences ----

StatusOr<Value> First(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("first", args, {}).status());
  if (v.is_undefined()) return v;
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("last", args, {}).status());
  if (v.is_list() && v.seq_kind() == SeqKind::kIterator) {
    return InvalidArgumentError("'generator' object is not reversible");
  }
  if (!v.is_undefined() && !v.is_list() && !v.is_dict() && !v.is_string()) {
    return InvalidArgumentError("'" + v.TypeName() + "' object is not reversible");
  }
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

StatusOr<Value> Join(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("join", args, {"d", "attribute"}));
  const std::string sep = ToPyStr(b.GetOr(0, Value::Str("")));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const Value* attribute = b.Get(1);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    KVF_ASSIGN_OR_RETURN(Value item, GetPath(items[i], parts, nullptr, budget));
    if (i > 0) out += sep;
    out += ToPyStr(item);
    KVF_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  KVF_RETURN_IF_ERROR(budget.ChargeBytes(out.size()));
  return Value::Str(std::move(out));
}

StatusOr<Value> Items(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("items", args, {}).status());
  if (v.is_undefined()) return Iterator({});
  if (!v.is_dict()) return InvalidArgumentError("Can only get item pairs from a mapping.");
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(v.as_dict().size())));
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().entries()) {
    out.push_back(Value::MakeList({Value::Str(k), item}, SeqKind::kTuple));
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Reverse(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("reverse", args, {}).status());
  if (v.is_string()) {
    auto cps = utf8::Decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::Str(utf8::Encode(cps));
  }
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::reverse(items.begin(), items.end());
  const bool reversible = !(v.is_list() && v.seq_kind() == SeqKind::kIterator);
  return Value::MakeList(std::move(items), reversible ? SeqKind::kIterator : SeqKind::kList);
}

// Python's sorted(..., key=attrgetter) with Jinja2's case folding.
StatusOr<std::vector<Value>> SortKeys(const std::vector<Value>& items, const Value* attribute,
                                      bool case_sensitive, Budget& budget) {
  std::vector<std::vector<Value>> paths;
  if (attribute != nullptr && !attribute->is_none()) {
    if (attribute->is_string()) {
      KVF_ASSIGN_OR_RETURN(auto names,
                           StrSplit(attribute->as_string(), std::string(","), -1, false));
      for (auto& n : names) paths.push_back(AttributeParts(Value::Str(n)));
    } else {
      paths.push_back({*attribute});
    }
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    if (paths.empty()) {
      keys.push_back(case_sensitive ? item : IgnoreCase(item));
      continue;
    }
    std::vector<Value> parts;
    for (const auto& path : paths) {
      KVF_ASSIGN_OR_RETURN(Value k, GetPath(item, path, nullptr, budget));
      parts.push_back(case_sensitive ? k : IgnoreCase(k));
    }
    keys.push_back(Value::MakeList(std::move(parts)));
  }
  return keys;
}

StatusOr<Value> Sort(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  KVF_ASSIGN_OR_RETURN(auto keys,
                       SortKeys(items, b.Get(2), b.GetOr(1, Value::Bool(false)).Truthy(), budget));
  KVF_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), b.GetOr(0, Value::Bool(false)).Truthy()));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> DictSort(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_dict())
    return InvalidArgumentError("'" + v.TypeName() + "' object has no attribute 'items'");
  const Value by = b.GetOr(1, Value::Str("key"));
  if (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value")) {
    return InvalidArgumentError("You can only sort by either \"key\" or \"value\"");
  }
  const bool case_sensitive = b.GetOr(0, Value::Bool(false)).Truthy();
  std::vector<Value> items, keys;
  for (const auto& [k, item] : v.as_dict().entries()) {
    items.push_back(Value::MakeList({Value::Str(k), item}, SeqKind::kTuple));
    const Value key = by.as_string() == "key" ? Value::Str(k) : item;
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(items.size())));
  KVF_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), b.GetOr(2, Value::Bool(false)).Truthy()));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> MinMax(const Value& v, const CallArgs& args, Budget& budget, bool max) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  KVF_ASSIGN_OR_RETURN(auto keys,
                       SortKeys(items, b.Get(1), b.GetOr(0, Value::Bool(false)).Truthy(), budget));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    KVF_ASSIGN_OR_RETURN(bool better, max ? Less(keys[best], keys[i]) : Less(keys[i], keys[best]));
    if (better) best = i;
  }
  return items[best];
}

StatusOr<Value> Sum(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("sum", args, {"attribute", "start"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const Value* attribute = b.Get(0);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  Value total = b.GetOr(1, Value::Int(0));
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, nullptr, budget));
    KVF_ASSIGN_OR_RETURN(total, Arithmetic("+", total, x, budget));
  }
  return total;
}

StatusOr<Value> Unique(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("unique", args, {"case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const bool case_sensitive = b.GetOr(0, Value::Bool(false)).Truthy();
  const Value* attribute = b.Get(1);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value key, GetPath(item, parts, nullptr, budget));
    if (!case_sensitive) key = IgnoreCase(key);
    if ((key.is_list() && key.seq_kind() == SeqKind::kList) || key.is_dict()) {
      return InvalidArgumentError("unhashable type: '" + key.TypeName() + "'");
    }
    KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(seen.size())));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Batch(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("batch", args, {"linecount", "fill_with"}, 1));
  KVF_ASSIGN_OR_RETURN(int64_t count, ArgInt("batch", "linecount", *b.Get(0)));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::vector<Value> out;
  std::vector<Value> row;
  for (const Value& item : items) {
    if (static_cast<int64_t>(row.size()) == count) {
      out.push_back(Value::MakeList(std::move(row)));
      row.clear();
    }
    row.push_back(item);
  }
  if (!row.empty()) {
    const Value* fill = b.Get(1);
    if (fill != nullptr && !fill->is_none() && static_cast<int64_t>(row.size()) < count) {
      KVF_RETURN_IF_ERROR(budget.Charge(count - static_cast<int64_t>(row.size())));
      row.resize(count, *fill);
    }
    out.push_back(Value::MakeList(std::move(row)));
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Map(const Value& v, const CallArgs& args, Budget& budget) {
  if (!v.Truthy()) return Iterator({});
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::vector<Value> out;
  if (args.args.empty() && !args.kwargs.empty()) {
    KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("map", args, {"attribute", "default"}, 1));
    const auto parts = AttributeParts(*b.Get(0));
    const Value* fallback = b.Get(1);
    for (const Value& item : items) {
      KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, fallback, budget));
      out.push_back(std::move(x));
    }
    return Iterator(std::move(out));
  }
  if (args.args.empty()) return InvalidArgumentError("map requires a filter argument");
  KVF_ASSIGN_OR_RETURN(std::string name, ArgString("map", "name", args.args[0]));
  CallArgs rest{{args.args.begin() + 1, args.args.end()}, args.kwargs};
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, ApplyFilter(name, item, rest, budget));
    out.push_back(std::move(x));
  }
  return Iterator(std::move(out));
}

// select/reject (lookup_attr false) and selectattr/rejectattr (true).
StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& args, Budget& budget,
                               bool lookup_attr, bool select) {
  if (!v.Truthy()) return Iterator({});
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (args.args.empty()) return InvalidArgumentError("Missing parameter for attribute name");
    parts = AttributeParts(args.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  if (args.args.size() > off) {
    KVF_ASSIGN_OR_RETURN(test, ArgString("select", "test", args.args[off]));
  }
  CallArgs rest;
  if (args.args.size() > off + 1) rest.args.assign(args.args.begin() + off + 1, args.args.end());
  rest.kwargs = args.kwargs;
  std::vector<Value> out;
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, nullptr, budget));
    bool pass = x.Truthy();
    if (test) {
      KVF_ASSIGN_OR_RETURN(pass, ApplyTest(*test, x, rest, budget));
    }
    if (pass == select) out.push_back(item);
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Attr(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("attr", args, {"name"}, 1));
  KVF_ASSIGN_OR_RETURN(std::string name, ArgString("attr", "name", *b.Get(0)));
  if (v.is_dict()) {  // an attribute only: no fallback to the item
    if (std::optional<Value> m = LookupMethod(v, name, &budget)) return *std::move(m);
    return Value::Undefined("'dict object' has no attribute '" + name + "'");
  }
  return GetAttr(v, name, budget);
}

// A filter of one string argument-less function; `make` builds the result from v and s.
#define KVF_STR_FILTER(make, expr)                                              \
  [](const Value& v, const CallArgs& args, Budget& budget) -> StatusOr<Value> { \
    KVF_RETURN_IF_ERROR(BoundArgs::Bind("filter", args, {}).status());          \
    const std::string s = ToPyStr(v);                                           \
    KVF_RETURN_IF_ERROR(budget.ChargeBytes(s.size()));                          \
    return make(expr);                                                          \
  }
#define KVF_KEEP(expr) LikeInput(v, expr)
#define KVF_PLAIN(expr) Value::Str(expr)
#define KVF_MARKUP(expr) Value::Markup(expr)

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* table = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", Abs},
      {"attr", Attr},
      {"batch", Batch},
      {"capitalize", KVF_STR_FILTER(KVF_KEEP, StrCapitalize(s))},
      {"center",
       [](const Value& v, const CallArgs& args, Budget& budget) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("center", args, {"width"}));
         KVF_ASSIGN_OR_RETURN(int64_t w, ArgInt("center", "width", b.GetOr(0, Value::Int(80))));
         KVF_ASSIGN_OR_RETURN(std::string out, StrPad(ToPyStr(v), w, " ", Align::kCenter, budget));
         return LikeInput(v, std::move(out));
       }},
      {"count",
       [](const Value& v, const CallArgs&, Budget&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(int64_t n, Length(v));
         return Value::Int(n);
       }},
      {"default",
       [](const Value& v, const CallArgs& args, Budget&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b,
                              BoundArgs::Bind("default", args, {"default_value", "boolean"}));
         const bool boolean = b.GetOr(1, Value::Bool(false)).Truthy();
         if (v.is_undefined() || (boolean && !v.Truthy())) return b.GetOr(0, Value::Str(""));
         return v;
       }},
      {"dictsort", DictSort},
      {"escape", KVF_STR_FILTER(KVF_MARKUP, v.is_markup() ? s : HtmlEscape(s))},
      {"forceescape", KVF_STR_FILTER(KVF_MARKUP, HtmlEscape(s))},
      {"first", First},
      {"float", FloatFilter},
      {"format", Format},
      {"indent", Indent},
      {"int", IntFilter},
      {"items", Items},
      {"join", Join},
      {"last", Last},
      {"list",
       [](const Value& v, const CallArgs&, Budget& budget) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
         return Value::MakeList(std::move(items));
       }},
      {"lower", KVF_STR_FILTER(KVF_KEEP, StrLower(s))},
      {"map", Map},
      {"max", [](auto& v, auto& a, auto& budget) { return MinMax(v, a, budget, true); }},
      {"min", [](auto& v, auto& a, auto& budget) { return MinMax(v, a, budget, false); }},
      {"reject",
       [](auto& v, auto& a, auto& budget) { return SelectOrReject(v, a, budget, false, false); }},
      {"rejectattr",
       [](auto& v, auto& a, auto& budget) { return SelectOrReject(v, a, budget, true, false); }},
      {"replace", Replace},
      {"reverse", Reverse},
      {"round", Round},
      {"safe", KVF_STR_FILTER(KVF_MARKUP, s)},
      {"select",
       [](auto& v, auto& a, auto& budget) { return SelectOrReject(v, a, budget, false, true); }},
      {"selectattr",
       [](auto& v, auto& a, auto& budget) { return SelectOrReject(v, a, budget, true, true); }},
      {"sort", Sort},
      {"string", KVF_STR_FILTER(KVF_KEEP, s)},
      {"sum", Sum},
      {"title", KVF_STR_FILTER(KVF_PLAIN, JinjaTitle(s))},
      {"tojson", ToJsonFilter},
      {"trim", Trim},
      {"unique", Unique},
      {"upper", KVF_STR_FILTER(KVF_KEEP, StrUpper(s))},
  };
  return *table;
}

#undef KVF_STR_FILTER
#undef KVF_KEEP
#undef KVF_PLAIN
#undef KVF_MARKUP

// Jinja2's aliases.
std::string_view Canonical(std::string_view name) {
  if (name == "d") return "default";
  if (name == "e") return "escape";
  if (name == "length") return "count";
  return name;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return Filters().count(Canonical(name)) != 0; }

StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand, const CallArgs& args,
                            Budget& budget) {
  auto it = Filters().find(Canonical(name));
  if (it == Filters().end()) {
    return InvalidArgumentError("No filter named '" + std::string(name) + "'.");
  }
  return it->second(operand, args, budget);
}

}  // namespace kvferry::jinja
