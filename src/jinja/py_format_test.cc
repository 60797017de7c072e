#include "jinja/py_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "jinja/utf8.h"
#include "jinja/value.h"

namespace kvferry::jinja {
namespace {

TEST(FloatRepr, ShortestRoundTripInPythonsLayout) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(0.1), "0.1");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(0.00001), "1e-05");
  EXPECT_EQ(FloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(FloatRepr(1e100), "1e+100");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(123456.789), "123456.789");
  EXPECT_EQ(FloatRepr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FloatRepr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(FloatRepr(std::nan("")), "nan");
}

TEST(PyRepr, StringsPickTheirQuotesAndEscape) {
  EXPECT_EQ(PyRepr(Value::Str("a")), "'a'");
  EXPECT_EQ(PyRepr(Value::Str("it's")), "\"it's\"");
  EXPECT_EQ(PyRepr(Value::Str("'\"")), "'\\'\"'");
  EXPECT_EQ(PyRepr(Value::Str("a\nb\t\\")), "'a\\nb\\t\\\\'");
  EXPECT_EQ(PyRepr(Value::Str(std::string("\x01\x7f", 2))), "'\\x01\\x7f'");
  EXPECT_EQ(PyRepr(Value::Str("é\xc2\xa0")), "'é\\xa0'");  // U+00A0 is not printable
}

TEST(PyRepr, Containers) {
  Dict d;
  d.Set("k", Value::MakeList({Value::None(), Value::Bool(true), Value::Float(1.5)}));
  EXPECT_EQ(PyRepr(Value::MakeDict(d)), "{'k': [None, True, 1.5]}");
  EXPECT_EQ(PyRepr(Value::MakeList({Value::Int(1)}, SeqKind::kTuple)), "(1,)");
  EXPECT_EQ(PyRepr(Value::MakeList({}, SeqKind::kTuple)), "()");
  EXPECT_EQ(ToPyStr(Value::MakeList({Value::Str("x")})), "['x']");
  EXPECT_EQ(ToPyStr(Value::Str("x")), "x");
  EXPECT_EQ(ToPyStr(Value()), "");
  EXPECT_EQ(ToPyStr(Value::None()), "None");
}

TEST(ToJson, HuggingFaceDefaults) {
  Dict d;
  d.Set("z", Value::Str("é\"\n"));
  d.Set("a", Value::MakeList({Value::Int(1), Value::Float(2.0), Value::None()}));
  const Value v = Value::MakeDict(d);
  EXPECT_EQ(*ToJson(v, {}), "{\"z\": \"é\\\"\\n\", \"a\": [1, 2.0, null]}");
  JsonOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*ToJson(Value::Str("é😀"), ascii), "\"\\u00e9\\ud83d\\ude00\"");
  JsonOptions sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(*ToJson(v, sorted), "{\"a\": [1, 2.0, null], \"z\": \"é\\\"\\n\"}");
}

TEST(ToJson, IndentMatchesJsonDumps) {
  Dict inner;
  inner.Set("c", Value::Str("x"));
  Dict d;
  d.Set("b", Value::MakeList({Value::Int(1), Value::MakeDict(inner)}));
  d.Set("e", Value::MakeList({}));
  JsonOptions o;
  o.indent = "  ";
  EXPECT_EQ(*ToJson(Value::MakeDict(d), o),
            "{\n  \"b\": [\n    1,\n    {\n      \"c\": \"x\"\n    }\n  ],\n  \"e\": []\n}");
}

TEST(ToJson, RefusesWhatJsonCannotHold) {
  auto st = ToJson(Value::Undefined("'x' is undefined"), {});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "Object of type Undefined is not JSON serializable");
  Value deep = Value::Int(0);
  for (int i = 0; i < kMaxNesting + 2; ++i) deep = Value::MakeList({deep});
  EXPECT_FALSE(ToJson(deep, {}).ok());
}

TEST(Utf8, ValidityAndCodePoints) {
  EXPECT_TRUE(utf8::IsValid("héllo 世界 😀"));
  EXPECT_FALSE(utf8::IsValid("\xc3"));          // truncated
  EXPECT_FALSE(utf8::IsValid("\xc0\xaf"));      // overlong
  EXPECT_FALSE(utf8::IsValid("\xed\xa0\x80"));  // surrogate
  EXPECT_EQ(utf8::Length("héllo"), 5u);
  EXPECT_EQ(utf8::Encode(utf8::Decode("a é 😀")), "a é 😀");
  EXPECT_TRUE(utf8::IsSpace(0x3000));
  EXPECT_FALSE(utf8::IsSpace(0x200B));
  EXPECT_EQ(utf8::ToUpper(U'é'), U'É');
  EXPECT_EQ(utf8::ToLower(U'Ω'), U'ω');
}

TEST(ValueFromJson, KeepsOrderAndRejectsWhatItCannotHold) {
  auto j = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 1.5, "s"]})");
  auto v = Value::FromJson(j);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->as_dict().entries()[0].first, "z");
  EXPECT_EQ(PyRepr(*v), "{'z': 1, 'a': [True, None, 1.5, 's']}");

  EXPECT_EQ(Value::FromJson(nlohmann::ordered_json(uint64_t{1} << 63)).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Value::FromJson(nlohmann::ordered_json("\xff")).status().code(),
            StatusCode::kInvalidArgument);
  nlohmann::ordered_json deep = 0;
  for (int i = 0; i < kMaxNesting + 2; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_FALSE(Value::FromJson(deep).ok());
}

TEST(ValueEquals, PythonSemantics) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Int(1), Value::Bool(true)));
  EXPECT_FALSE(Equals(Value::Str("1"), Value::Int(1)));
  EXPECT_FALSE(
      Equals(Value::MakeList({Value::Int(1)}), Value::MakeList({Value::Int(1)}, SeqKind::kTuple)));
  EXPECT_TRUE(Equals(Value(), Value::Undefined("x")));
  EXPECT_FALSE(Equals(Value(), Value::None()));
}

}  // namespace
}  // namespace kvferry::jinja
