// Python's printf-style string formatting, `"%s: %d" % (a, b)`, used by the `%` operator on a
// string and the `format` filter: conversions s r a d i u o x X e E f F g G c %, flags
// `-+ #0`, width and precision (numbers or `*`). Mapping keys `%(name)s` are not supported.
//
// Thread-safety: pure function.
#pragma once

#include <string>

#include "jinja/budget.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

// `fmt % args`: a tuple supplies several arguments, anything else one. With `escape` (fmt is
// Markup) string arguments that are not Markup themselves are HTML-escaped, as markupsafe does.
StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args, bool escape,
                                    Budget& budget);

}  // namespace kvferry::jinja
