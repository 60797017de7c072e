// Parser: tokens -> syntax tree, following Jinja2's grammar and operator precedence (lowest
// first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary
// - +, then postfix (.attr, [index], [a:b:c], calls) and filters/tests (`| f`, `is t`), which
// bind tighter than any binary operator.
//
// Statements: if/elif/else, for (with `else`, a loop filter `if cond`, tuple targets), set
// (names, tuples, `ns.attr`, blocks with filters), macro, call, filter, print, break/continue
// (the loopcontrols extension), raw (handled by the lexer), and Hugging Face's
// {% generation %}. Template inheritance and inclusion (extends, block, include, import) are
// refused with kUnimplemented; so are recursive loops.
//
// As Jinja2's compiler does, an unknown filter or test name is an error at parse time unless
// it sits inside an `if` statement or a conditional expression (then it fails when used) and
// not in a loop, macro, call, filter or set block nested there (those start afresh).
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

// How deep statements and expressions may nest; deeper templates are refused so that neither
// the parser nor the evaluator can exhaust the stack.
inline constexpr int kMaxParseDepth = 100;

// Parses the tokens of `map`. Errors are kInvalidArgument (or kUnimplemented) with
// "line L, column C: ..." in the message.
StatusOr<ast::Body> Parse(const std::vector<Token>& tokens, const SourceMap& map);

}  // namespace kvferry::jinja
