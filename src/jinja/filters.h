// The filters a template applies with `value | name(args)`, with Jinja2's semantics and
// Hugging Face's `tojson` (json.dumps with ensure_ascii=False, optional indent, separators,
// sort_keys):
//
//   strings   capitalize center escape/e/forceescape format indent lower replace safe string
//             title trim upper
//   numbers   abs float int round
//   sequences batch count/length dictsort first items join last list map max min reject
//             rejectattr reverse select selectattr sort sum unique
//   other     attr default/d tojson
//
// select, reject, map, unique, batch, items and reverse (of a list) return one-shot iterators
// as Jinja2 does (truthy, no length); `| list` materializes them.
//
// Thread-safety: pure functions (the Budget is the caller's).
#pragma once

#include <string_view>

#include "jinja/budget.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

bool IsKnownFilter(std::string_view name);

// Applies filter `name` to `operand`. An unknown name fails with "No filter named 'x'.".
StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand, const CallArgs& args,
                            Budget& budget);

}  // namespace kvferry::jinja
