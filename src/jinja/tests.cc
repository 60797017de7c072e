#include "jinja/tests.h"

#include <unordered_map>

#include "jinja/call_args.h"
#include "jinja/filters.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

using TestFn = StatusOr<bool> (*)(const Value& v, const CallArgs& args, Budget& budget);

// The single argument of a comparison-style test.
StatusOr<Value> Other(std::string_view name, const CallArgs& args) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind(name, args, {"other"}, 1));
  return *b.Get(0);
}

StatusOr<bool> Compare(std::string_view op, const Value& v, const CallArgs& args) {
  KVF_ASSIGN_OR_RETURN(Value other, Other(op, args));
  return CompareOp(op, v, other);
}

// value % n == expected (odd, even, divisibleby).
StatusOr<bool> ModuloIs(const Value& v, const Value& n, int64_t expected, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(Value m, Arithmetic("%", v, n, budget));
  return Equals(m, Value::Int(expected));
}

// Python's str(v).islower() / isupper().
bool CaseIs(const Value& v, bool upper) {
  bool any = false;
  for (char32_t cp : utf8::Decode(ToPyStr(v))) {
    if (!utf8::IsCased(cp)) continue;
    if (upper ? !utf8::IsUpper(cp) : !utf8::IsLower(cp)) return false;
    any = true;
  }
  return any;
}

// `is sameas`: Python identity, for the values whose identity is predictable.
bool SameAs(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kBool:
      return a.as_bool() == b.as_bool();
    case Value::Kind::kInt:  // CPython caches small ints
      return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    default:
      return a.identity() != nullptr && a.identity() == b.identity();
  }
}

const std::unordered_map<std::string_view, TestFn>& Tests() {
  static const auto* table = new std::unordered_map<std::string_view, TestFn>{
      {"defined", [](auto& v, auto&, auto&) -> StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_none(); }},
      {"boolean", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_bool(); }},
      {"true", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_bool() && v.as_bool(); }},
      {"false",
       [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_int(); }},
      {"float", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_float(); }},
      {"number", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_number(); }},
      {"string", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_string(); }},
      {"mapping", [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_dict(); }},
      {"iterable",
       [](auto& v, auto&, auto&) -> StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       [](auto& v, auto&, auto&) -> StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_dict() ||
                (v.is_list() && v.seq_kind() != SeqKind::kIterator);
       }},
      {"callable",  // Jinja2's Undefined defines __call__ (to raise)
       [](auto& v, auto&, auto&) -> StatusOr<bool> { return v.is_callable() || v.is_undefined(); }},
      {"escaped", [](auto&, auto&, auto&) -> StatusOr<bool> { return false; }},
      {"lower", [](auto& v, auto&, auto&) -> StatusOr<bool> { return CaseIs(v, false); }},
      {"upper", [](auto& v, auto&, auto&) -> StatusOr<bool> { return CaseIs(v, true); }},
      {"odd", [](auto& v, auto&, auto& budget) { return ModuloIs(v, Value::Int(2), 1, budget); }},
      {"even", [](auto& v, auto&, auto& budget) { return ModuloIs(v, Value::Int(2), 0, budget); }},
      {"divisibleby",
       [](auto& v, auto& a, auto& budget) -> StatusOr<bool> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("divisibleby", a, {"num"}, 1));
         return ModuloIs(v, *b.Get(0), 0, budget);
       }},
      {"sameas",
       [](auto& v, auto& a, auto&) -> StatusOr<bool> {
         KVF_ASSIGN_OR_RETURN(Value other, Other("sameas", a));
         return SameAs(v, other);
       }},
      {"in",
       [](auto& v, auto& a, auto&) -> StatusOr<bool> {
         KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("in", a, {"seq"}, 1));
         return Contains(*b.Get(0), v);
       }},
      {"filter",
       [](auto& v, auto&, auto&) -> StatusOr<bool> {
         return v.is_string() && IsKnownFilter(v.as_string());
       }},
      {"test",
       [](auto& v, auto&, auto&) -> StatusOr<bool> {
         return v.is_string() && IsKnownTest(v.as_string());
       }},
      {"==", [](auto& v, auto& a, auto&) { return Compare("==", v, a); }},
      {"eq", [](auto& v, auto& a, auto&) { return Compare("==", v, a); }},
      {"equalto", [](auto& v, auto& a, auto&) { return Compare("==", v, a); }},
      {"!=", [](auto& v, auto& a, auto&) { return Compare("!=", v, a); }},
      {"ne", [](auto& v, auto& a, auto&) { return Compare("!=", v, a); }},
      {">", [](auto& v, auto& a, auto&) { return Compare(">", v, a); }},
      {"gt", [](auto& v, auto& a, auto&) { return Compare(">", v, a); }},
      {"greaterthan", [](auto& v, auto& a, auto&) { return Compare(">", v, a); }},
      {">=", [](auto& v, auto& a, auto&) { return Compare(">=", v, a); }},
      {"ge", [](auto& v, auto& a, auto&) { return Compare(">=", v, a); }},
      {"<", [](auto& v, auto& a, auto&) { return Compare("<", v, a); }},
      {"lt", [](auto& v, auto& a, auto&) { return Compare("<", v, a); }},
      {"lessthan", [](auto& v, auto& a, auto&) { return Compare("<", v, a); }},
      {"<=", [](auto& v, auto& a, auto&) { return Compare("<=", v, a); }},
      {"le", [](auto& v, auto& a, auto&) { return Compare("<=", v, a); }},
  };
  return *table;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return Tests().count(name) != 0; }

StatusOr<bool> ApplyTest(std::string_view name, const Value& operand, const CallArgs& args,
                         Budget& budget) {
  auto it = Tests().find(name);
  if (it == Tests().end())
    return InvalidArgumentError("No test named '" + std::string(name) + "'.");
  return it->second(operand, args, budget);
}

}  // namespace kvferry::jinja
