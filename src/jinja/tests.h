// The tests a template applies with `value is [not] name(args)`, with Jinja2's semantics:
// defined undefined none boolean true false integer float number string mapping iterable
// sequence callable sameas escaped lower upper odd even divisibleby in filter test, and the
// comparisons eq/equalto/==, ne/!=, gt/greaterthan/>, ge/>=, lt/lessthan/<, le/<=.
//
// Thread-safety: pure functions (the Budget is the caller's).
#pragma once

#include <string_view>

#include "jinja/budget.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

bool IsKnownTest(std::string_view name);

// Applies test `name` to `operand`. An unknown name fails with "No test named 'x'.".
StatusOr<bool> ApplyTest(std::string_view name, const Value& operand, const CallArgs& args,
                         Budget& budget);

}  // namespace kvferry::jinja
