// Operators and lookups with Python's semantics and the sandbox's rules, as Jinja2 evaluates
// them under ImmutableSandboxedEnvironment:
//
//   arithmetic  + - * / // % ** on int/float/bool; str and list + and *; str % (printf);
//               ints are 64-bit here, and overflow is an error instead of a bigint
//   comparison  == != < <= > >= (lists and tuples lexicographically), `in`
//   lookups     obj.attr tries the attribute (a method such as s.strip) then obj['attr'];
//               obj[key] tries the item then the attribute; a miss is an Undefined whose
//               message is Jinja2's ("'dict object' has no attribute 'x'"); methods that would
//               mutate a list or dict are "unsafe" Undefineds
//   Undefined   any operation on it except printing, testing, iterating (empty) and len (0)
//               fails with its message (Jinja2's default Undefined)
//
// Errors are kInvalidArgument with Python's message (TypeError, ZeroDivisionError, ...).
//
// Thread-safety: pure functions (the Budget is the caller's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/budget.h"
#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

// The error using an Undefined raises: its hint, or "'name' is undefined".
Status UndefinedError(const Value& undefined);

// Jinja2's object_type_repr: "dict object", "None", ...
std::string ObjectTypeRepr(const Value& v);

// `op` is one of + - * / // % **.
StatusOr<Value> Arithmetic(std::string_view op, const Value& a, const Value& b, Budget& budget);
// Unary - and +.
StatusOr<Value> UnaryArithmetic(std::string_view op, const Value& v);

// `op` is one of == != < <= > >= in notin.
StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);
// Python's a < b.
StatusOr<bool> Less(const Value& a, const Value& b);
// Python's `item in container`.
StatusOr<bool> Contains(const Value& container, const Value& item);

StatusOr<Value> GetAttr(const Value& obj, const std::string& name, Budget& budget);
StatusOr<Value> GetItem(const Value& obj, const Value& key, Budget& budget);
// obj[start:stop:step]; each bound may be None. Unlike an item lookup this raises on what
// cannot be sliced, as Jinja2 compiles slices to plain Python subscription.
StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step,
                         Budget& budget);

// The items a for loop or a filter walks: a list's items, a dict's keys, a string's
// characters; empty for Undefined. Charges one step per item.
StatusOr<std::vector<Value>> Iterate(const Value& v, Budget& budget);

// Python's len(): code points of a string, items of a list or dict, 0 for Undefined.
StatusOr<int64_t> Length(const Value& v);

}  // namespace kvferry::jinja
