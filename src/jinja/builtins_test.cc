// Operators, methods, filters and tests on their own, without templates (the oracle test in
// tests/jinja checks them against Jinja2 through templates).
#include <gtest/gtest.h>

#include "jinja/filters.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"
#include "jinja/tests.h"

namespace kvferry::jinja {
namespace {

Value Str(const char* s) { return Value::Str(s); }
Value Int(int64_t i) { return Value::Int(i); }

class Builtins : public ::testing::Test {
 protected:
  std::string Op(std::string_view op, const Value& a, const Value& b) {
    auto v = Arithmetic(op, a, b, budget_);
    return v.ok() ? PyRepr(*v) : "ERROR " + std::string(v.status().message());
  }
  std::string Filter(std::string_view name, const Value& v, CallArgs args = {}) {
    auto r = ApplyFilter(name, v, args, budget_);
    return r.ok() ? PyRepr(*r) : "ERROR " + std::string(r.status().message());
  }
  Budget budget_{1'000'000, 1 << 20};
};

TEST_F(Builtins, ArithmeticIsPythons) {
  EXPECT_EQ(Op("//", Int(-7), Int(2)), "-4");
  EXPECT_EQ(Op("%", Int(-7), Int(3)), "2");
  EXPECT_EQ(Op("%", Value::Float(7.5), Int(-2)), "-0.5");
  EXPECT_EQ(Op("/", Int(4), Int(2)), "2.0");
  EXPECT_EQ(Op("**", Int(2), Int(-1)), "0.5");
  EXPECT_EQ(Op("+", Value::Bool(true), Value::Bool(true)), "2");
  EXPECT_EQ(Op("*", Str("ab"), Int(2)), "'abab'");
  EXPECT_EQ(Op("+", Str("a"), Int(1)), "ERROR can only concatenate str (not \"int\") to str");
  EXPECT_EQ(Op("/", Int(1), Int(0)), "ERROR division by zero");
  EXPECT_EQ(Op("**", Int(2), Int(64)), "ERROR integer overflow (template integers are 64-bit)");
  EXPECT_EQ(Op("+", Value::Undefined("'u' is undefined"), Int(1)), "ERROR 'u' is undefined");
  EXPECT_EQ(
      Op("%", Str("%s=%05.1f"), Value::MakeList({Str("x"), Value::Float(2.25)}, SeqKind::kTuple)),
      "'x=002.2'");
  EXPECT_EQ(Op("%", Str("abc"), Value::MakeList({Int(1)})), "'abc'");  // a list is a mapping
  EXPECT_EQ(Op("%", Str("abc"), Int(1)),
            "ERROR not all arguments converted during string formatting");
}

TEST_F(Builtins, ComparisonsAndMembership) {
  EXPECT_TRUE(
      *CompareOp("<", Value::MakeList({Int(1), Int(2)}), Value::MakeList({Int(1), Int(3)})));
  EXPECT_FALSE(CompareOp("<", Str("a"), Int(1)).ok());
  EXPECT_TRUE(*Contains(Str("abc"), Str("b")));
  EXPECT_FALSE(Contains(Str("abc"), Int(1)).ok());
  EXPECT_FALSE(*Contains(Value(), Int(1)));  // Undefined iterates as empty
}

TEST_F(Builtins, LookupsFallBackAndMissesAreUndefined) {
  Dict d;
  d.Set("content", Str("c"));
  d.Set("items", Str("shadowed by the method"));
  const Value dict = Value::MakeDict(d);
  EXPECT_EQ(PyRepr(*GetAttr(dict, "content", budget_)), "'c'");
  EXPECT_TRUE(GetAttr(dict, "items", budget_)->is_callable());
  EXPECT_EQ(*GetItem(dict, Str("items"), budget_)->as_string().data(), 's');
  const Value miss = *GetAttr(dict, "zz", budget_);
  EXPECT_EQ(miss.undefined_hint(), "'dict object' has no attribute 'zz'");
  EXPECT_EQ(GetItem(Value::MakeList({Int(1)}), Int(5), budget_)->undefined_hint(),
            "list object has no element 5");
  EXPECT_EQ(GetAttr(Value::Undefined("'x' is undefined"), "a", budget_).status().message(),
            "'x' is undefined");
  const Value append = *GetAttr(Value::MakeList({}), "append", budget_);
  EXPECT_EQ(append.undefined_hint(), "access to attribute 'append' of 'list' object is unsafe.");
}

TEST_F(Builtins, SlicesByCodePoint) {
  auto s = GetSlice(Str("héllo"), Value::None(), Value::None(), Int(-1), budget_);
  EXPECT_EQ(s->as_string(), "olléh");
  s = GetSlice(Str("héllo"), Int(1), Int(3), Value::None(), budget_);
  EXPECT_EQ(s->as_string(), "él");
  EXPECT_FALSE(GetSlice(Str("x"), Value::None(), Value::None(), Int(0), budget_).ok());
  // Unlike item lookups, slices raise (Jinja2 compiles them to plain Python subscription).
  EXPECT_EQ(GetSlice(Int(3), Int(1), Value::None(), Value::None(), budget_).status().message(),
            "'int' object is not subscriptable");
  EXPECT_EQ(GetSlice(Value::MakeDict({}), Int(1), Value::None(), Value::None(), budget_)
                .status()
                .message(),
            "unhashable type: 'slice'");
}

TEST_F(Builtins, MarkupEscapesWhatItIsCombinedWith) {
  const Value safe = Value::Markup("<a>");
  EXPECT_EQ(Op("+", safe, Str("<b>")), "Markup('<a>&lt;b&gt;')");
  EXPECT_EQ(Op("+", Str("&"), safe), "Markup('&amp;<a>')");
  EXPECT_EQ(Op("%", Value::Markup("%s|%s"), Value::MakeList({Str("<"), safe}, SeqKind::kTuple)),
            "Markup('&lt;|<a>')");
  EXPECT_EQ(Filter("escape", Str("<'\"&>")), "Markup('&lt;&#39;&#34;&amp;&gt;')");
  EXPECT_EQ(Filter("escape", safe), "Markup('<a>')");
  EXPECT_EQ(Filter("forceescape", safe), "Markup('&lt;a&gt;')");
  EXPECT_EQ(Filter("upper", safe), "Markup('<A>')");
  EXPECT_EQ(Filter("title", safe), "'<A>'");
}

TEST_F(Builtins, StringMethods) {
  auto call = [&](const char* s, const char* m, std::vector<Value> args) {
    auto method = LookupMethod(Str(s), m, &budget_);
    if (!method) return std::string("NO METHOD");
    auto r = method->as_callable().fn(CallArgs{std::move(args), {}});
    return r.ok() ? PyRepr(*r) : "ERROR " + std::string(r.status().message());
  };
  EXPECT_EQ(call("a<b>c", "split", {Str("<b>")}), "['a', 'c']");
  EXPECT_EQ(call(" a  b ", "split", {}), "['a', 'b']");
  EXPECT_EQ(call("\n\nx\n", "strip", {Str("\n")}), "'x'");
  EXPECT_EQ(call("they're", "title", {}), "\"They'Re\"");
  EXPECT_EQ(call("héllo", "find", {Str("l")}), "2");
  EXPECT_EQ(call("{} {}", "format", {Int(1), Str("x")}), "'1 x'");
  EXPECT_EQ(call("abc", "startswith", {Value::MakeList({Str("x"), Str("a")}, SeqKind::kTuple)}),
            "True");
  EXPECT_EQ(call("x", "zfill", {Int(3)}),
            "ERROR str.zfill() is not supported by kvferry's renderer");
  EXPECT_EQ(call("x", "nosuch", {}), "NO METHOD");
}

TEST_F(Builtins, Filters) {
  EXPECT_EQ(Filter("trim", Str("  x \n")), "'x'");
  EXPECT_EQ(Filter("length", Str("héllo")), "5");
  EXPECT_EQ(Filter("length", Value()), "0");
  EXPECT_EQ(Filter("join", Value::MakeList({Int(1), Str("a")}), {{Str("-")}, {}}), "'1-a'");
  EXPECT_EQ(Filter("default", Value(), {{Str("d")}, {}}), "'d'");
  EXPECT_EQ(Filter("first", Value::MakeList({})).substr(0, 9), "Undefined");
  EXPECT_EQ(Filter("title", Str("hello-world (x)")), "'Hello-World (X)'");
  EXPECT_EQ(Filter("int", Str("42.7")), "42");
  EXPECT_EQ(Filter("round", Value::Float(2.5)), "2.0");
  EXPECT_EQ(Filter("tojson", Str("é")), "'\"é\"'");
  EXPECT_EQ(Filter("select", Value::MakeList({Int(1), Int(2), Int(3)}), {{Str("odd")}, {}}),
            "<generator object>");
  EXPECT_EQ(Filter("list", *ApplyFilter("select", Value::MakeList({Int(1), Int(2), Int(3)}),
                                        {{Str("odd")}, {}}, budget_)),
            "[1, 3]");
  EXPECT_EQ(Filter("length", *ApplyFilter("reverse", Value::MakeList({Int(1)}), {}, budget_)),
            "ERROR object of type 'generator' has no len()");
  EXPECT_EQ(Filter("nosuch", Int(1)), "ERROR No filter named 'nosuch'.");
  EXPECT_TRUE(IsKnownFilter("d"));
  EXPECT_FALSE(IsKnownFilter("pprint"));
}

TEST_F(Builtins, Tests) {
  auto test = [&](const char* name, const Value& v, std::vector<Value> args = {}) {
    auto r = ApplyTest(name, v, CallArgs{std::move(args), {}}, budget_);
    return r.ok() ? (*r ? "true" : "false") : "ERROR " + std::string(r.status().message());
  };
  EXPECT_EQ(test("defined", Value()), "false");
  EXPECT_EQ(test("none", Value::None()), "true");
  EXPECT_EQ(test("integer", Value::Bool(true)), "false");
  EXPECT_EQ(test("number", Value::Bool(true)), "true");
  EXPECT_EQ(test("divisibleby", Int(9), {Int(3)}), "true");
  EXPECT_EQ(test("equalto", Int(1), {Value::Float(1.0)}), "true");
  EXPECT_EQ(test("odd", Value::Undefined("'u' is undefined")), "ERROR 'u' is undefined");
  EXPECT_EQ(test("nosuch", Int(1)), "ERROR No test named 'nosuch'.");
}

TEST_F(Builtins, BudgetStopsRunawayWork) {
  Budget small(100, 1000);
  EXPECT_EQ(Arithmetic("*", Str("ab"), Int(1000), small).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Arithmetic("*", Value::MakeList({Int(1)}), Int(1000), small).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Arithmetic("*", Str("ab"), Int(int64_t{1} << 62), small).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace kvferry::jinja
