#include "jinja/methods.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "jinja/call_args.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

using StrFn = StatusOr<Value> (*)(const std::string& s, const CallArgs& args, Budget& budget);

StatusOr<std::optional<int64_t>> OptIndex(std::string_view fn, const BoundArgs& b, size_t i) {
  const Value* v = b.Get(i);
  if (v == nullptr || v->is_none()) return std::optional<int64_t>();
  KVF_ASSIGN_OR_RETURN(int64_t n, ArgInt(fn, "index", *v));
  return std::optional<int64_t>(n);
}

StatusOr<std::optional<std::string>> OptString(std::string_view fn, const BoundArgs& b, size_t i) {
  const Value* v = b.Get(i);
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) {
    return InvalidArgumentError(std::string(fn) + " arg must be None or str");
  }
  return std::optional<std::string>(v->as_string());
}

Value StrList(std::vector<std::string> parts, SeqKind kind = SeqKind::kList) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::Str(std::move(p)));
  return Value::MakeList(std::move(items), kind);
}

StatusOr<Value> AffixTest(const std::string& s, const CallArgs& args, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind(fn, args, {"prefix", "start", "end"}, 1));
  KVF_ASSIGN_OR_RETURN(auto start, OptIndex(fn, b, 1));
  KVF_ASSIGN_OR_RETURN(auto end, OptIndex(fn, b, 2));
  const std::string window = (start || end) ? StrSubstr(s, start, end) : s;
  std::vector<Value> candidates;
  const Value& arg = *b.Get(0);
  if (arg.is_list() && arg.seq_kind() == SeqKind::kTuple) {
    candidates = arg.items();
  } else {
    candidates.push_back(arg);
  }
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return InvalidArgumentError(std::string(fn) +
                                  " first arg must be str or a tuple of str, not " + c.TypeName());
    }
    const std::string& a = c.as_string();
    if (a.size() > window.size()) continue;
    if (prefix ? window.compare(0, a.size(), a) == 0
               : window.compare(window.size() - a.size(), a.size(), a) == 0) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

StatusOr<Value> Strip(const std::string& s, const CallArgs& args, bool left, bool right) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("strip", args, {"chars"}));
  KVF_ASSIGN_OR_RETURN(auto chars, OptString("strip", b, 0));
  return Value::Str(StripChars(s, chars, left, right));
}

StatusOr<Value> Split(const std::string& s, const CallArgs& args, bool from_right) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("split", args, {"sep", "maxsplit"}));
  KVF_ASSIGN_OR_RETURN(auto sep, OptString("split", b, 0));
  KVF_ASSIGN_OR_RETURN(int64_t maxsplit, ArgInt("split", "maxsplit", b.GetOr(1, Value::Int(-1))));
  KVF_ASSIGN_OR_RETURN(auto parts, StrSplit(s, sep, maxsplit, from_right));
  return StrList(std::move(parts));
}

StatusOr<Value> Find(const std::string& s, const CallArgs& args, const char* fn, bool from_right,
                     bool raise) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind(fn, args, {"sub", "start", "end"}, 1));
  KVF_ASSIGN_OR_RETURN(std::string sub, ArgString(fn, "sub", *b.Get(0)));
  KVF_ASSIGN_OR_RETURN(auto start, OptIndex(fn, b, 1));
  KVF_ASSIGN_OR_RETURN(auto end, OptIndex(fn, b, 2));
  const int64_t at = StrFind(s, sub, start, end, from_right);
  if (at < 0 && raise) return InvalidArgumentError("substring not found");
  return Value::Int(at);
}

StatusOr<Value> Pad(const std::string& s, const CallArgs& args, Align align, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("pad", args, {"width", "fillchar"}, 1));
  KVF_ASSIGN_OR_RETURN(int64_t width, ArgInt("pad", "width", *b.Get(0)));
  KVF_ASSIGN_OR_RETURN(std::string fill, ArgString("pad", "fillchar", b.GetOr(1, Value::Str(" "))));
  KVF_ASSIGN_OR_RETURN(std::string out, StrPad(s, width, fill, align, budget));
  return Value::Str(std::move(out));
}

StatusOr<Value> Partition(const std::string& s, const CallArgs& args, bool from_right) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("partition", args, {"sep"}, 1));
  KVF_ASSIGN_OR_RETURN(std::string sep, ArgString("partition", "sep", *b.Get(0)));
  if (sep.empty()) return InvalidArgumentError("empty separator");
  const size_t at = from_right ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos) {
    return from_right ? StrList({"", "", s}, SeqKind::kTuple)
                      : StrList({s, "", ""}, SeqKind::kTuple);
  }
  return StrList({s.substr(0, at), sep, s.substr(at + sep.size())}, SeqKind::kTuple);
}

StatusOr<Value> Join(const std::string& s, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("join", args, {"iterable"}, 1));
  const Value& seq = *b.Get(0);
  std::vector<Value> items;
  if (seq.is_list()) {
    items = seq.items();
  } else if (seq.is_dict()) {
    for (const auto& [k, v] : seq.as_dict().entries()) items.push_back(Value::Str(k));
  } else if (seq.is_string()) {
    for (char32_t cp : utf8::Decode(seq.as_string())) {
      std::string c;
      utf8::Append(cp, &c);
      items.push_back(Value::Str(std::move(c)));
    }
  } else {
    return InvalidArgumentError("can only join an iterable");
  }
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(items.size())));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return InvalidArgumentError("sequence item " + std::to_string(i) +
                                  ": expected str instance, " + items[i].TypeName() + " found");
    }
    if (i > 0) out += s;
    out += items[i].as_string();
    KVF_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  return Value::Str(std::move(out));
}

// str.format with plain fields: {}, {0}, {name}, optionally with !s or !r.
StatusOr<Value> Format(const std::string& s, const CallArgs& args, Budget& budget) {
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}')
        ++i;
      else
        return InvalidArgumentError("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos)
      return InvalidArgumentError("Single '{' encountered in format string");
    std::string field = s.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r')) {
        return UnimplementedError("str.format: only !s and !r conversions are supported");
      }
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos) {
      return UnimplementedError("str.format: format specs and field lookups are not supported");
    }
    const Value* arg = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      size_t index = auto_index;
      if (field.empty()) {
        used_auto = true;
        ++auto_index;
      } else {
        used_manual = true;
        index = std::stoul(field.substr(0, 9));
      }
      if (used_auto && used_manual) {
        return InvalidArgumentError(
            "cannot switch from automatic field numbering to manual field specification");
      }
      if (index >= args.args.size()) {
        return InvalidArgumentError("Replacement index " + std::to_string(index) +
                                    " out of range for positional args tuple");
      }
      arg = &args.args[index];
    } else {
      for (const auto& [k, v] : args.kwargs) {
        if (k == field) arg = &v;
      }
      if (arg == nullptr) return InvalidArgumentError("'" + field + "'");
    }
    out += conversion == 'r' ? PyRepr(*arg) : ToPyStr(*arg);
    KVF_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  return Value::Str(std::move(out));
}

// A predicate over the code points (isdigit, isspace, ...): true if all hold and s is
// non-empty.
template <typename Pred>
Value AllCodePoints(const std::string& s, Pred pred) {
  const auto cps = utf8::Decode(s);
  return Value::Bool(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
}

bool IsAsciiAlpha(char32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
bool IsAlpha(char32_t cp) { return IsAsciiAlpha(cp) || (cp >= 0x80 && utf8::IsCased(cp)); }
bool IsDigitCp(char32_t cp) { return cp >= '0' && cp <= '9'; }

// islower/isupper: every cased character has the case, and there is at least one.
Value CaseTest(const std::string& s, bool upper) {
  bool any = false;
  for (char32_t cp : utf8::Decode(s)) {
    if (!utf8::IsCased(cp)) continue;
    if (upper ? !utf8::IsUpper(cp) : !utf8::IsLower(cp)) return Value::Bool(false);
    any = true;
  }
  return Value::Bool(any);
}

Status NoArgs(std::string_view fn, const CallArgs& args) {
  if (!args.args.empty() || !args.kwargs.empty()) {
    return InvalidArgumentError(std::string(fn) + "() takes no arguments");
  }
  return Status::Ok();
}

const std::unordered_map<std::string, StrFn>& StrMethods() {
  static const auto* table = new std::unordered_map<std::string, StrFn>{
      {"startswith", [](auto& s, auto& a, auto&) { return AffixTest(s, a, true); }},
      {"endswith", [](auto& s, auto& a, auto&) { return AffixTest(s, a, false); }},
      {"strip", [](auto& s, auto& a, auto&) { return Strip(s, a, true, true); }},
      {"lstrip", [](auto& s, auto& a, auto&) { return Strip(s, a, true, false); }},
      {"rstrip", [](auto& s, auto& a, auto&) { return Strip(s, a, false, true); }},
      {"split", [](auto& s, auto& a, auto&) { return Split(s, a, false); }},
      {"rsplit", [](auto& s, auto& a, auto&) { return Split(s, a, true); }},
      {"splitlines",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("splitlines", a, {"keepends"}));
         return StrList(StrSplitLines(s, b.GetOr(0, Value::Bool(false)).Truthy()));
       }},
      {"upper",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_RETURN_IF_ERROR(NoArgs("upper", a));
         return Value::Str(StrUpper(s));
       }},
      {"lower",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_RETURN_IF_ERROR(NoArgs("lower", a));
         return Value::Str(StrLower(s));
       }},
      {"title",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_RETURN_IF_ERROR(NoArgs("title", a));
         return Value::Str(StrTitle(s));
       }},
      {"capitalize",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_RETURN_IF_ERROR(NoArgs("capitalize", a));
         return Value::Str(StrCapitalize(s));
       }},
      {"replace",
       [](auto& s, auto& a, auto& budget) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("replace", a, {"old", "new", "count"}, 2));
         KVF_ASSIGN_OR_RETURN(std::string old, ArgString("replace", "old", *b.Get(0)));
         KVF_ASSIGN_OR_RETURN(std::string repl, ArgString("replace", "new", *b.Get(1)));
         KVF_ASSIGN_OR_RETURN(int64_t n, ArgInt("replace", "count", b.GetOr(2, Value::Int(-1))));
         KVF_ASSIGN_OR_RETURN(std::string out, StrReplace(s, old, repl, n, budget));
         return Value::Str(std::move(out));
       }},
      {"find", [](auto& s, auto& a, auto&) { return Find(s, a, "find", false, false); }},
      {"rfind", [](auto& s, auto& a, auto&) { return Find(s, a, "rfind", true, false); }},
      {"index", [](auto& s, auto& a, auto&) { return Find(s, a, "index", false, true); }},
      {"rindex", [](auto& s, auto& a, auto&) { return Find(s, a, "rindex", true, true); }},
      {"count",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("count", a, {"sub", "start", "end"}, 1));
         KVF_ASSIGN_OR_RETURN(std::string sub, ArgString("count", "sub", *b.Get(0)));
         KVF_ASSIGN_OR_RETURN(auto start, OptIndex("count", b, 1));
         KVF_ASSIGN_OR_RETURN(auto end, OptIndex("count", b, 2));
         return Value::Int(StrCount(s, sub, start, end));
       }},
      {"join", [](auto& s, auto& a, auto& budget) { return Join(s, a, budget); }},
      {"format", [](auto& s, auto& a, auto& budget) { return Format(s, a, budget); }},
      {"center", [](auto& s, auto& a, auto& budget) { return Pad(s, a, Align::kCenter, budget); }},
      {"ljust", [](auto& s, auto& a, auto& budget) { return Pad(s, a, Align::kLeft, budget); }},
      {"rjust", [](auto& s, auto& a, auto& budget) { return Pad(s, a, Align::kRight, budget); }},
      {"partition", [](auto& s, auto& a, auto&) { return Partition(s, a, false); }},
      {"rpartition", [](auto& s, auto& a, auto&) { return Partition(s, a, true); }},
      {"removeprefix",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("removeprefix", a, {"prefix"}, 1));
         KVF_ASSIGN_OR_RETURN(std::string p, ArgString("removeprefix", "prefix", *b.Get(0)));
         return Value::Str(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
       }},
      {"removesuffix",
       [](auto& s, auto& a, auto&) -> StatusOr<Value> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("removesuffix", a, {"suffix"}, 1));
         KVF_ASSIGN_OR_RETURN(std::string p, ArgString("removesuffix", "suffix", *b.Get(0)));
         const bool has =
             !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
         return Value::Str(has ? s.substr(0, s.size() - p.size()) : s);
       }},
      {"isdigit",
       [](auto& s, auto&, auto&) -> StatusOr<Value> { return AllCodePoints(s, IsDigitCp); }},
      {"isalpha",
       [](auto& s, auto&, auto&) -> StatusOr<Value> { return AllCodePoints(s, IsAlpha); }},
      {"isalnum",
       [](auto& s, auto&, auto&) -> StatusOr<Value> {
         return AllCodePoints(s, [](char32_t cp) { return IsAlpha(cp) || IsDigitCp(cp); });
       }},
      {"isspace",
       [](auto& s, auto&, auto&) -> StatusOr<Value> { return AllCodePoints(s, utf8::IsSpace); }},
      {"isascii",
       [](auto& s, auto&, auto&) -> StatusOr<Value> { return Value::Bool(utf8::IsAscii(s)); }},
      {"islower", [](auto& s, auto&, auto&) -> StatusOr<Value> { return CaseTest(s, false); }},
      {"isupper", [](auto& s, auto&, auto&) -> StatusOr<Value> { return CaseTest(s, true); }},
  };
  return *table;
}

// Python str methods this renderer does not implement: they exist, but calling one fails.
const std::unordered_set<std::string>& UnsupportedStrMethods() {
  static const auto* names = new std::unordered_set<std::string>{
      "casefold",     "encode",    "expandtabs",  "format_map", "isdecimal",
      "isidentifier", "isnumeric", "isprintable", "istitle",    "maketrans",
      "swapcase",     "translate", "zfill"};
  return *names;
}

Value UnsupportedMethod(const std::string& type, const std::string& name) {
  return Value::MakeCallable(type + "." + name, [type, name](CallArgs) -> StatusOr<Value> {
    return UnimplementedError(type + "." + name + "() is not supported by kvferry's renderer");
  });
}

Value Unsafe(const std::string& type, const std::string& name) {
  return Value::Undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
}

std::optional<Value> StrMethod(const std::string& s, const std::string& name, Budget* budget) {
  const auto& table = StrMethods();
  auto it = table.find(name);
  if (it != table.end()) {
    StrFn fn = it->second;
    return Value::MakeCallable("str." + name, [s, fn, budget](CallArgs args) -> StatusOr<Value> {
      KVF_RETURN_IF_ERROR(budget->ChargeBytes(s.size()));
      return fn(s, args, *budget);
    });
  }
  if (UnsupportedStrMethods().count(name) != 0) return UnsupportedMethod("str", name);
  return std::nullopt;
}

Value ItemsOf(const Dict& d) {
  std::vector<Value> items;
  items.reserve(d.size());
  for (const auto& [k, v] : d.entries()) {
    items.push_back(Value::MakeList({Value::Str(k), v}, SeqKind::kTuple));
  }
  return Value::MakeList(std::move(items));
}

std::optional<Value> DictMethod(const Value& obj, const std::string& name) {
  if (name == "get") {
    return Value::MakeCallable("dict.get", [obj](CallArgs args) -> StatusOr<Value> {
      KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("get", args, {"key", "default"}, 1));
      const Value& key = *b.Get(0);
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().Find(key.as_string())) return *v;
      } else if (key.is_list() || key.is_dict()) {
        return InvalidArgumentError("unhashable type: '" + key.TypeName() + "'");
      }
      return b.GetOr(1, Value::None());
    });
  }
  if (name == "items" || name == "keys" || name == "values" || name == "copy") {
    return Value::MakeCallable("dict." + name, [obj, name](CallArgs args) -> StatusOr<Value> {
      KVF_RETURN_IF_ERROR(NoArgs(name, args));
      const Dict& d = obj.as_dict();
      if (name == "items") return ItemsOf(d);
      if (name == "copy") return obj;
      std::vector<Value> out;
      for (const auto& [k, v] : d.entries()) out.push_back(name == "keys" ? Value::Str(k) : v);
      return Value::MakeList(std::move(out));
    });
  }
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" ||
      name == "update") {
    return Unsafe("dict", name);
  }
  if (name == "fromkeys") return UnsupportedMethod("dict", name);
  return std::nullopt;
}

std::optional<Value> ListMethod(const Value& obj, const std::string& name) {
  const bool tuple = obj.seq_kind() == SeqKind::kTuple;
  const std::string type = tuple ? "tuple" : "list";
  if (name == "count") {
    return Value::MakeCallable(type + ".count", [obj](CallArgs args) -> StatusOr<Value> {
      KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("count", args, {"value"}, 1));
      return Value::Int(std::count_if(obj.items().begin(), obj.items().end(),
                                      [&](const Value& v) { return Equals(v, *b.Get(0)); }));
    });
  }
  if (name == "index") {
    return Value::MakeCallable(type + ".index", [obj, type](CallArgs args) -> StatusOr<Value> {
      KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("index", args, {"value"}, 1));
      const auto& items = obj.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (Equals(items[i], *b.Get(0))) return Value::Int(static_cast<int64_t>(i));
      }
      return InvalidArgumentError(type == "tuple" ? "tuple.index(x): x not in tuple"
                                                  : PyRepr(*b.Get(0)) + " is not in list");
    });
  }
  if (tuple) return std::nullopt;
  if (name == "copy") {
    return Value::MakeCallable("list.copy", [obj](CallArgs args) -> StatusOr<Value> {
      KVF_RETURN_IF_ERROR(NoArgs("copy", args));
      return obj;
    });
  }
  static const std::unordered_set<std::string> kMutating = {"append", "clear",  "extend",  "insert",
                                                            "pop",    "remove", "reverse", "sort"};
  if (kMutating.count(name) != 0) return Unsafe("list", name);
  return std::nullopt;
}

}  // namespace

std::optional<Value> LookupMethod(const Value& obj, const std::string& name, Budget* budget) {
  if (obj.is_string()) return StrMethod(obj.as_string(), name, budget);
  if (obj.is_dict()) return DictMethod(obj, name);
  if (obj.is_list() && obj.seq_kind() != SeqKind::kIterator) return ListMethod(obj, name);
  return std::nullopt;
}

}  // namespace kvferry::jinja
