// Evaluator: walks a parsed template with a context and writes the output, with Jinja2's
// runtime semantics:
//
//   scopes    template-level `set`s shadow the context, which shadows the globals; each for-loop
//             iteration, `for ... else`, macro call, call/filter/set block body runs in a fresh
//             child scope, so a `set` there is gone afterwards (use a namespace to carry values
//             out); `if` does not open a scope; names a scope sets before any use start out
//             undefined there (scopes.h)
//   loops     `loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/
//             depth/depth0/cycle()`, loop filters, tuple unpacking, `else`, break/continue
//   macros    positional and keyword arguments, defaults evaluated at call time, `varargs`,
//             `kwargs`, `caller` for {% call %}; a macro sees the scope it was defined in
//   globals   range (at most 100000 items, as the sandbox), dict, namespace,
//             raise_exception(msg), strftime_now(fmt)
//
// Runtime errors carry the line and column of the expression or statement that failed;
// raise_exception's message is passed through unchanged.
//
// Thread-safety: one call renders on the calling thread; the tree and context are only read.
#pragma once

#include <string>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"
#include "kvferry/jinja/template.h"

namespace kvferry::jinja {

// Renders `body`, whose scopes AnalyzeScopes (scopes.h) annotated; `root_undefined` is what it
// returned for the template level.
StatusOr<std::string> Evaluate(const ast::Body& body, const ast::StartUndefined& root_undefined,
                               const SourceMap& map, const Dict& context,
                               const RenderOptions& options);

}  // namespace kvferry::jinja
