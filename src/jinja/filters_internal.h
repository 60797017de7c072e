// The filters' implementations, by kind: filters_str.cc (strings), filters_num.cc (numbers),
// filters_seq.cc (sequences); filters.cc holds the rest, the name table and the entry points
// of filters.h. Only those files include this header; everyone else calls ApplyFilter.
//
// Each function is a filter as the table calls it: the operand, the call's arguments, and the
// render's Budget, which it charges for what it builds.
//
// Thread-safety: pure functions (the Budget is the caller's).
#pragma once

#include <string>

#include "jinja/budget.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja::internal {

inline bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// A string result of a str method applied to `in`: Markup stays Markup, as markupsafe's
// methods return Markup.
inline Value LikeInput(const Value& in, std::string s) {
  return in.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
}

// ---- strings (filters_str.cc) ----

StatusOr<Value> Trim(const Value& v, const CallArgs& args, Budget& budget);
// Jinja2's title: words start after runs of whitespace, '-', '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s);
StatusOr<Value> Indent(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Replace(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Format(const Value& v, const CallArgs& args, Budget& budget);

// ---- numbers (filters_num.cc) ----

StatusOr<Value> IntFilter(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> FloatFilter(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Round(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Abs(const Value& v, const CallArgs& args, Budget& budget);

// ---- sequences (filters_seq.cc) ----

StatusOr<Value> First(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Last(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Join(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Items(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Reverse(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Sort(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> DictSort(const Value& v, const CallArgs& args, Budget& budget);
// min (max false) and max (max true).
StatusOr<Value> MinMax(const Value& v, const CallArgs& args, Budget& budget, bool max);
StatusOr<Value> Sum(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Unique(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Batch(const Value& v, const CallArgs& args, Budget& budget);
StatusOr<Value> Map(const Value& v, const CallArgs& args, Budget& budget);
// select/reject (lookup_attr false) and selectattr/rejectattr (true).
StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& args, Budget& budget,
                               bool lookup_attr, bool select);

}  // namespace kvferry::jinja::internal
