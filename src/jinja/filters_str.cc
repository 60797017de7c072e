// The string filters: trim, title, indent, replace, format (and, in filters.cc's table, the
// argument-less ones over str methods).
#include <algorithm>
#include <optional>

#include "jinja/call_args.h"
#include "jinja/filters_internal.h"
#include "jinja/operators.h"
#include "jinja/percent_format.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace kvferry::jinja::internal {

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

}  // namespace kvferry::jinja::internal
