#include "jinja/lexer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvferry::jinja {
namespace {

// Tokens of `source` in a compact form: data as [text], tags as {{ }} {% %}, names bare,
// strings quoted "...", numbers as written, operators as written.
std::string Lex(const std::string& source) {
  SourceMap map(NormalizeNewlines(source));
  auto tokens = Tokenize(map);
  if (!tokens.ok()) return "ERROR " + std::string(tokens.status().message());
  std::string out;
  for (const Token& t : *tokens) {
    if (!out.empty()) out += " ";
    switch (t.kind) {
      case TokenKind::kData:
        out += "[" + t.text + "]";
        break;
      case TokenKind::kVariableBegin:
        out += "{{";
        break;
      case TokenKind::kVariableEnd:
        out += "}}";
        break;
      case TokenKind::kBlockBegin:
        out += "{%";
        break;
      case TokenKind::kBlockEnd:
        out += "%}";
        break;
      case TokenKind::kString:
        out += "\"" + t.text + "\"";
        break;
      case TokenKind::kInteger:
        out += "i" + std::to_string(t.int_value);
        break;
      case TokenKind::kFloat:
        out += "f" + t.text;
        break;
      case TokenKind::kEof:
        out += "EOF";
        break;
      default:
        out += t.text;
    }
  }
  return out;
}

TEST(Lexer, DataAndTags) {
  EXPECT_EQ(Lex("a{{ x }}b{% if y %}c"), "[a] {{ x }} [b] {% if y %} [c] EOF");
  EXPECT_EQ(Lex("a{# comment #}b"), "[a] [b] EOF");
  EXPECT_EQ(Lex(""), "EOF");
}

TEST(Lexer, NewlinesNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(NormalizeNewlines("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(NormalizeNewlines("a\n\n"), "a\n");
}

TEST(Lexer, TrimBlocksRemovesTheNewlineAfterABlockOrComment) {
  EXPECT_EQ(Lex("{% if x %}\ny{% endif %}\n\nz"), "{% if x %} [y] {% endif %} [\nz] EOF");
  EXPECT_EQ(Lex("{# c #}\ny"), "[y] EOF");
  EXPECT_EQ(Lex("{% if x +%}\ny"), "{% if x %} [\ny] EOF");
  EXPECT_EQ(Lex("{{ x }}\ny"), "{{ x }} [\ny] EOF");  // not after a variable
}

TEST(Lexer, LstripBlocksRemovesIndentBeforeABlockTag) {
  EXPECT_EQ(Lex("a\n   {% if x %}b"), "[a\n] {% if x %} [b] EOF");
  EXPECT_EQ(Lex("  {% if x %}"), "{% if x %} EOF");                // at the start
  EXPECT_EQ(Lex("a  {% if x %}"), "[a  ] {% if x %} EOF");         // not at line start
  EXPECT_EQ(Lex("a\n   {{ x }}"), "[a\n   ] {{ x }} EOF");         // not before variables
  EXPECT_EQ(Lex("a\n   {%+ if x %}"), "[a\n   ] {% if x %} EOF");  // + keeps it
}

TEST(Lexer, MinusStripsWhitespaceOnItsSide) {
  EXPECT_EQ(Lex("a \n {{- x -}} \n b"), "[a] {{ x }} [b] EOF");
  EXPECT_EQ(Lex("a  {%- if x -%}  b"), "[a] {% if x %} [b] EOF");
  EXPECT_EQ(Lex("a  {#- c -#}  b"), "[a] [b] EOF");
  EXPECT_EQ(Lex("a\xe3\x80\x80{{- x }}"), "[a] {{ x }} EOF");  // Unicode whitespace too
}

TEST(Lexer, RawBlocksAreData) {
  EXPECT_EQ(Lex("{% raw %}{{ x }}{% endraw %}"), "[{{ x }}] EOF");
  EXPECT_EQ(Lex("{% raw -%}  {{ x }}  {%- endraw %}"), "[{{ x }}] EOF");
  EXPECT_EQ(Lex("{% raw %}x"), "ERROR line 1, column 1: Missing end of raw directive");
}

TEST(Lexer, ExpressionTokens) {
  EXPECT_EQ(Lex("{{ a.b[0] ~ 'x' | f(1.5, k=2) }}"),
            "{{ a . b [ i0 ] ~ \"x\" | f ( f1.5 , k = i2 ) }} EOF");
  EXPECT_EQ(Lex("{{ 1_000 0x1F 0o17 0b101 1e3 2.5e-1 }}"),
            "{{ i1000 i31 i15 i5 f1e3 f2.5e-1 }} EOF");
  EXPECT_EQ(Lex("{{ a // b ** c != d <= e }}"), "{{ a // b ** c != d <= e }} EOF");
  EXPECT_EQ(Lex("{{ xs.0 }}"), "{{ xs . i0 }} EOF");
}

TEST(Lexer, BracesInsideATagDoNotCloseIt) {
  EXPECT_EQ(Lex("{{ {'a': {'b': 1}} }}"), "{{ { \"a\" : { \"b\" : i1 } } }} EOF");
  EXPECT_EQ(Lex("{{ (1 }}"), "ERROR line 1, column 7: unexpected '}', expected ')'");
}

TEST(Lexer, StringEscapesArePythons) {
  EXPECT_EQ(Lex(R"({{ 'a\nb' }})"), "{{ \"a\nb\" }} EOF");
  EXPECT_EQ(Lex(R"({{ "\x41\u00e9\U0001F600\101\'" }})"), "{{ \"Aé😀A'\" }} EOF");
  EXPECT_EQ(Lex(R"({{ 'keep \d' }})"), "{{ \"keep \\d\" }} EOF");
  EXPECT_EQ(Lex(R"({{ '\x4' }})"), "ERROR line 1, column 4: truncated \\xXX escape");
}

TEST(Lexer, ErrorsNameLineAndColumn) {
  EXPECT_EQ(Lex("a\n{{ 'é' ! }}"), "ERROR line 2, column 8: unexpected char '!'");
  EXPECT_EQ(Lex("x\n  {# open"), "ERROR line 2, column 3: Missing end of comment tag");
  EXPECT_EQ(Lex("{{ 'open }}"), "ERROR line 1, column 4: unexpected char '''");
}

TEST(Lexer, EndOfInputInsideATagEndsTheTokens) {
  EXPECT_EQ(Lex("{{ x"), "{{ x EOF");  // the parser reports what is missing
}

}  // namespace
}  // namespace kvferry::jinja
