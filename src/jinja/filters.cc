#include "jinja/filters.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "jinja/call_args.h"
#include "jinja/filters_internal.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"

namespace kvferry::jinja {
namespace internal {
namespace {

using FilterFn = StatusOr<Value> (*)(const Value& v, const CallArgs& args, Budget& budget);

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
}  // namespace internal

bool IsKnownFilter(std::string_view name) {
  return internal::Filters().count(internal::Canonical(name)) != 0;
}

StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand, const CallArgs& args,
                            Budget& budget) {
  auto it = internal::Filters().find(internal::Canonical(name));
  if (it == internal::Filters().end()) {
    return InvalidArgumentError("No filter named '" + std::string(name) + "'.");
  }
  return it->second(operand, args, budget);
}

}  // namespace kvferry::jinja
