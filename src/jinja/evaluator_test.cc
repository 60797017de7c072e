// The evaluator through the public API (Template, RenderChat): semantics Jinja2 would show
// too are checked against Jinja2 itself in tests/jinja; here are the renderer's own contracts:
// error codes and locations, limits, the clock, the chat context, sharing across threads.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "kvferry/jinja/chat.h"
#include "kvferry/jinja/template.h"

namespace kvferry::jinja {
namespace {

using Json = nlohmann::ordered_json;

StatusOr<std::string> Render(const std::string& source, const Json& context = Json::object(),
                             const RenderOptions& options = {}) {
  KVF_ASSIGN_OR_RETURN(Template t, Template::Parse(source));
  return t.Render(context, options);
}

TEST(Render, Basics) {
  auto out = Render("{% for m in messages %}{{ m.role }}: {{ m.content|trim }}\n{% endfor %}",
                    Json{{"messages", {{{"role", "user"}, {"content", " hi "}}}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "user: hi\n");
}

TEST(Render, RaiseExceptionGivesExactlyTheMessage) {
  auto out = Render("{% if true %}\n  {{ raise_exception('Roles must alternate!') }}{% endif %}");
  EXPECT_EQ(out.status(), InvalidArgumentError("Roles must alternate!"));
}

TEST(Render, RuntimeErrorsNameTheirLocation) {
  EXPECT_EQ(Render("ok\n  {{ missing.attr }}").status(),
            InvalidArgumentError("line 2, column 13: 'missing' is undefined"));
  EXPECT_EQ(
      Render("{{ 'a' + 1 }}").status(),
      InvalidArgumentError("line 1, column 8: can only concatenate str (not \"int\") to str"));
  EXPECT_EQ(Render("{% macro m() %}{{ 1 // 0 }}{% endmacro %}\n{{ m() }}").status(),
            InvalidArgumentError("line 1, column 21: integer division or modulo by zero"));
}

TEST(Render, ParseErrorsAreInvalidArgument) {
  EXPECT_EQ(Template::Parse("{% if %}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Template::Parse("\xff").status(),
            InvalidArgumentError("template source is not valid UTF-8"));
}

TEST(Render, ContextMustBeAnObject) {
  EXPECT_EQ(Render("x", Json::array()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*Render("x", nullptr), "x");
}

TEST(Limits, StepsBoundLoopsAndFilters) {
  RenderOptions o;
  o.max_steps = 1000;
  auto out = Render("{% for i in range(600) %}{% for j in range(2) %}{% endfor %}{% endfor %}",
                    Json::object(), o);
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("step limit"), std::string::npos);
  EXPECT_TRUE(Render("{% for i in range(100) %}{% endfor %}", Json::object(), o).ok());
}

TEST(Limits, OutputAndStringSizes) {
  RenderOptions o;
  o.max_output_bytes = 1000;
  EXPECT_EQ(Render("{% for i in range(201) %}hello{% endfor %}", Json::object(), o).status().code(),
            StatusCode::kOutOfRange);
  // A string doubled in a loop fails before it is allocated, not when printed.
  auto out = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      Json::object(), o);
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Render("{{ 'x' * 100000000000 }}", Json::object(), o).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Render("{{ range(100001)|length }}").status().code(), StatusCode::kOutOfRange);
}

TEST(Limits, RecursionDepth) {
  auto out = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("nests deeper than 500"), std::string::npos);
  // Branching recursion, shallow but exponential, runs out of steps instead.
  RenderOptions few_steps;
  few_steps.max_steps = 10000;
  out = Render(
      "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}"
      "{% endmacro %}{{ f(0) }}",
      Json::object(), few_steps);
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("step limit"), std::string::npos);
}

TEST(Globals, StrftimeNowFormatsTheGivenOrCurrentTime) {
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_wday = 5;
  o.now = tm;
  EXPECT_EQ(*Render("{{ strftime_now('%d %b %Y, %A %H h|%z|%f') }}", Json::object(), o),
            "26 Jul 2024, Friday 09 h||000000");
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  auto year = Render("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(year.ok());
  EXPECT_NEAR(std::stoi(*year), local.tm_year + 1900, 1);
}

TEST(Chat, ContextIsApplyChatTemplates) {
  ChatInputs in;
  in.messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  in.add_generation_prompt = true;
  in.special_tokens["eos_token"] = "</s>";
  in.extra["enable_thinking"] = false;
  auto ctx = ChatContext(in);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":null,"documents":null,)"
            R"("add_generation_prompt":true,"eos_token":"</s>","enable_thinking":false})");
  auto t = Template::Parse(
      "{{ bos_token is defined }} {{ tools is none }} {{ eos_token }} {{ enable_thinking }}");
  EXPECT_EQ(*RenderChat(*t, in), "False True </s> False");
  in.extra["messages"] = Json::array();
  EXPECT_EQ(ChatContext(in).status().code(), StatusCode::kInvalidArgument);
}

TEST(Template, OneTemplateRendersOnManyThreads) {
  auto t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      Json xs = Json::array();
      for (int k = 0; k <= i * 100; ++k) xs.push_back(k);
      for (int r = 0; r < 20; ++r) results[i] = t->Render(Json{{"xs", xs}}).value();
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) {
    const int n = i * 100;
    EXPECT_EQ(results[i], std::to_string(n * (n + 1) / 2));
  }
}

}  // namespace
}  // namespace kvferry::jinja
