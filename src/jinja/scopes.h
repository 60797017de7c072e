// Scope analysis: which names start out undefined in each scope, as Jinja2's compiler decides
// (jinja2/idtracking.py). Jinja2 resolves names per scope at compile time: a name whose first
// use in a scope is an unconditional `set`, and that no enclosing scope uses, is a local of
// that scope from its start, so until the `set` runs it is undefined, even where the context
// has it, and loops and macros nested in the scope see it undefined too:
//
//   {% for m in ms %}{{ bos_token }}{% endfor %}{% set bos_token = '' %}   -> prints nothing
//
// A `set` inside an if/elif/else that not all three branches make, or any use of the name
// before, keeps the outer value instead. The evaluator defines these names as Undefined when
// it opens the scope.
//
// Thread-safety: annotates the tree it is given; run once, right after parsing.
#pragma once

#include "jinja/ast.h"

namespace kvferry::jinja {

// Fills in the StartUndefined lists of the tree's scopes; returns the template-level one.
ast::StartUndefined AnalyzeScopes(ast::Body& body);

}  // namespace kvferry::jinja
